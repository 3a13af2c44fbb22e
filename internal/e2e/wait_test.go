package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// On the real broker, a push with ?wait=applied answers with what became
// of each mutation: the version that applied it, the mutator's error, a
// duplicate, a gap with the id to resend from; the Go client's Writer
// keeps order through all of it.
func TestPushWaitsForOutcomes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := startPipeline(t, 3)
	alice := client.New(pl.url, client.WithToken(pl.token(t, "alice", "p1", "p2")))

	w := alice.Writer("acme", "p1", client.WriterConfig{ClientGroup: "ga", Client: "a1"})
	mustAdd(t, w, "item.put", `{"collection":"tasks","id":"t1","data":{"title":"one"}}`)
	mustAdd(t, w, "item.patch", `{"collection":"tasks","id":"t1","data":{"done":true}}`)
	mustAdd(t, w, "item.delete", `{"collection":"tasks","id":"nope"}`) // error: no such item
	out, err := w.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"applied v1", "applied v2", "error v3"}
	for i, o := range out {
		if got := fmt.Sprintf("%s v%d", o.Status, o.Version); got != want[i] || o.ID != uint64(i+1) || o.Branch != "main" {
			t.Errorf("outcome %d: %+v, want %s", i, o, want[i])
		}
	}
	if !strings.Contains(out[2].Error, "nope") {
		t.Errorf("error outcome %q does not name the item", out[2].Error)
	}
	if out[2].Code != "not_found" {
		t.Errorf("error outcome code %q, want not_found", out[2].Code)
	}
	if out[0].Code != "" {
		t.Errorf("applied outcome has code %q", out[0].Code)
	}

	// A duplicate and a gap, pushed by hand.
	push := func(id uint64) client.Outcome {
		t.Helper()
		res, err := alice.Push(ctx, "acme", "p1", client.Push{ClientGroup: "ga", Mutations: []client.Mutation{
			{Client: "a1", ID: id, Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t2","data":1}`)}}},
			client.PushOptions{Wait: true, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res.Outcomes[0]
	}
	if o := push(2); o.Status != client.Duplicate || o.ID != 2 {
		t.Errorf("id 2 again: %+v, want a duplicate", o)
	}
	if o := push(9); o.Status != client.Rejected || o.Reason != schemas.ReasonGap || o.ExpectedID != 4 {
		t.Errorf("id 9 after 3: %+v, want a gap expecting 4", o)
	}
	// The store agrees: three versions.
	if h, err := pl.store.Head("acme", "p1", "main"); err != nil || h.Version != 3 {
		t.Fatalf("head of p1: %d, %v; want 3", h.Version, err)
	}
}

// A client group belongs to the principal that first used it in a
// project: the ingest refuses another principal's push into it with 409
// once it saw the binding; a producer that did not see it writes the
// mutations and the sequencer rejects them (unauthorized); either way
// nobody advances another user's ids.
func TestClientGroupBinding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := startPipeline(t, 3)
	alice := client.New(pl.url, client.WithToken(pl.token(t, "alice", "p1")))
	mallory := client.New(pl.url, client.WithToken(pl.token(t, "mallory", "p1")))

	wa := alice.Writer("acme", "p1", client.WriterConfig{ClientGroup: "tab-a", Client: "a1"})
	mustAdd(t, wa, "item.put", `{"collection":"tasks","id":"t1","data":1}`)
	if _, err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	spoof := client.Push{ClientGroup: "tab-a", Mutations: []client.Mutation{
		{Client: "a1", ID: 2, Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":666}`)}}}
	_, err := mallory.Push(ctx, "acme", "p1", spoof, client.PushOptions{})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != wire.CodeGroupOwned || apiErr.Field != "clientGroup" {
		t.Fatalf("mallory pushing into alice's group: %v, want 409 %s", err, wire.CodeGroupOwned)
	}

	// A producer started after the binding does not know it.
	fresh := client.New(pl.serveProducer(t, producer.Config{Partitions: 3}), client.WithToken(pl.token(t, "mallory", "p1")))
	res, err := fresh.Push(ctx, "acme", "p1", spoof, client.PushOptions{Wait: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Outcomes[0]; o.Status != client.Rejected || o.Reason != schemas.ReasonUnauthorized {
		t.Fatalf("the sequencer's answer to mallory: %+v, want rejected unauthorized", o)
	}
	// Alice's client goes on with id 2: mallory advanced nothing.
	mustAdd(t, wa, "item.put", `{"collection":"tasks","id":"t1","data":2}`)
	out, err := wa.Flush(ctx)
	if err != nil || len(out) != 1 || out[0].Status != client.Applied || out[0].ID != 2 {
		t.Fatalf("alice's id 2: %+v, %v", out, err)
	}
	_, body, ok, err := pl.store.Item("acme", "p1", "main", "tasks", "t1", 0)
	if err != nil || !ok || string(body) != "2" {
		t.Fatalf("t1 = %s (%v, %v), want alice's 2", body, ok, err)
	}
}

// A client belongs to one client group (issue: P1 pushes g1/c1 id 1, P2
// pushes g2/c1 id 2 and took over P1's ids): the ingest refuses a client
// of another group with 409 once it saw the binding, a producer that did
// not see it writes the mutation and the sequencer rejects it
// (unauthorized), and the owner's client goes on with its next id.
func TestClientBinding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := startPipeline(t, 3)
	p1 := client.New(pl.url, client.WithToken(pl.token(t, "p1", "p1")))
	p2 := client.New(pl.url, client.WithToken(pl.token(t, "p2", "p1")))
	w1 := p1.Writer("acme", "p1", client.WriterConfig{ClientGroup: "g1", Client: "c1"})
	mustAdd(t, w1, "item.put", `{"collection":"tasks","id":"t1","data":1}`)
	if out, err := w1.Flush(ctx); err != nil || len(out) != 1 || out[0].Status != client.Applied {
		t.Fatalf("p1's id 1: %+v, %v", out, err)
	}

	takeover := client.Push{ClientGroup: "g2", Mutations: []client.Mutation{
		{Client: "c1", ID: 2, Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":666}`)}}}
	_, err := p2.Push(ctx, "acme", "p1", takeover, client.PushOptions{})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != wire.CodeClientOwned ||
		apiErr.Field != "mutations[0].client" || !strings.Contains(apiErr.Message, "belongs to client group g1") {
		t.Fatalf("p2 pushing p1's client: %v, want 409 %s", err, wire.CodeClientOwned)
	}

	fresh := client.New(pl.serveProducer(t, producer.Config{Partitions: 3}), client.WithToken(pl.token(t, "p2", "p1")))
	res, err := fresh.Push(ctx, "acme", "p1", takeover, client.PushOptions{Wait: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Outcomes[0]; o.Status != client.Rejected || o.Reason != schemas.ReasonUnauthorized || !strings.Contains(o.Message, "client group g1") {
		t.Fatalf("the sequencer's answer to p2: %+v, want rejected unauthorized", o)
	}
	mustAdd(t, w1, "item.put", `{"collection":"tasks","id":"t1","data":2}`)
	if out, err := w1.Flush(ctx); err != nil || len(out) != 1 || out[0].Status != client.Applied || out[0].ID != 2 {
		t.Fatalf("p1's id 2: %+v, %v", out, err)
	}
	if g, ok, err := pl.store.ClientGroup("acme", "p1", "c1"); err != nil || !ok || g != "g1" {
		t.Fatalf("the store's group of c1: %q, %v, %v", g, ok, err)
	}
}

// A push that is written but not decided in time answers 202 with status
// timeout: here no sequencer runs.
func TestPushWaitTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl := startPipeline(t, 3, true)
	c := client.New(pl.url, client.WithToken(pl.token(t, "alice", "p1")))
	res, err := c.Push(ctx, "acme", "p1", client.Push{ClientGroup: "g", Mutations: []client.Mutation{
		{Client: "c", ID: 1, Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":1}`)}}},
		client.PushOptions{Wait: true, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].Status != client.Timeout || res.Outcomes[0].Offset != res.Mutations[0].Offset {
		t.Fatalf("%+v, want a timeout outcome at the written offset", res)
	}
	// Bad wait parameters are refused before anything is written.
	for _, q := range []string{"wait=soon", "timeout=5s", "wait=applied&timeout=5", "wait=applied&timeout=5m"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, pl.url+"/v1/projects/acme/p1/push?"+q,
			strings.NewReader(`{"clientGroup":"g","mutations":[{"client":"c","id":2,"name":"x","args":{}}]}`))
		req.Header.Set("Authorization", "Bearer "+pl.token(t, "alice", "p1"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

func mustAdd(t *testing.T, w *client.Writer, name, args string) {
	t.Helper()
	if _, err := w.Add(name, json.RawMessage(args)); err != nil {
		t.Fatal(err)
	}
}
