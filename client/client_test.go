package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCanon answers pushes from a script and records what it was sent.
type fakeCanon struct {
	mu      sync.Mutex
	pushes  [][]uint64 // the ids of each push received
	answers []func(p Push) (int, any)
}

func (f *fakeCanon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet { // a Writer asking for its client's last id, on a new project
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"branch_not_found","message":"project acme/p has no branch main"}}`))
		return
	}
	var p Push
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	var ids []uint64
	for _, m := range p.Mutations {
		ids = append(ids, m.ID)
	}
	f.pushes = append(f.pushes, ids)
	answer := f.answers[0]
	f.answers = f.answers[1:]
	f.mu.Unlock()
	status, body := answer(p)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func applied(p Push) (int, any) {
	var res Result
	for _, m := range p.Mutations {
		w := Written{Client: m.Client, ID: m.ID}
		res.Mutations = append(res.Mutations, w)
		res.Outcomes = append(res.Outcomes, Outcome{Written: w, Status: Applied, Version: m.ID})
	}
	return 200, res
}

func failing(status int, code string) func(Push) (int, any) {
	return func(Push) (int, any) {
		return status, map[string]any{"error": map[string]string{"code": code, "message": "try again"}}
	}
}

// Pushes that fail with 503, 429 or a broken connection are sent again,
// whole and in order; a 400 is not retried.
func TestPushRetriesInOrder(t *testing.T) {
	f := &fakeCanon{answers: []func(Push) (int, any){failing(503, "kafka_unavailable"), failing(429, "rate_limited"), applied, failing(400, "invalid")}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := New(srv.URL, WithRetries(5, time.Millisecond))
	w := c.Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c"})
	for i := range 3 {
		if _, err := w.Add("item.put", map[string]any{"collection": "t", "id": fmt.Sprint(i), "data": i}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := w.Flush(context.Background())
	if err != nil || len(out) != 3 || w.Pending() != 0 {
		t.Fatalf("flush: %v, %d outcomes, %d pending", err, len(out), w.Pending())
	}
	if want := [][]uint64{{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}; !slices.EqualFunc(f.pushes, want, slices.Equal) {
		t.Fatalf("pushes %v, want %v", f.pushes, want)
	}
	if _, err := w.Add("item.put", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	_, err = w.Flush(context.Background())
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != "invalid" || len(f.pushes) != 4 {
		t.Fatalf("a 400: %v after %d pushes; want one attempt and the *Error", err, len(f.pushes))
	}
	if w.Pending() != 1 {
		t.Fatalf("the refused mutation is not pending: %d", w.Pending())
	}
}

// After a gap naming an id the writer decided earlier, it resends from
// that id, in order; a gap before what it holds is an error.
func TestWriterResendsFromTheExpectedID(t *testing.T) {
	gap := func(expected uint64) func(Push) (int, any) {
		return func(p Push) (int, any) {
			var res Result
			for _, m := range p.Mutations {
				w := Written{Client: m.Client, ID: m.ID}
				res.Mutations = append(res.Mutations, w)
				res.Outcomes = append(res.Outcomes, Outcome{Written: w, Status: Rejected, Reason: "gap", ExpectedID: expected})
			}
			return 200, res
		}
	}
	f := &fakeCanon{answers: []func(Push) (int, any){applied, gap(2), applied, gap(1)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	w := New(srv.URL).Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c", Retain: 2})
	add := func(n int) {
		for range n {
			if _, err := w.Add("x", json.RawMessage(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(3)
	if _, err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	add(2)
	out, err := w.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]uint64{{1, 2, 3}, {4, 5}, {2, 3, 4, 5}}; !slices.EqualFunc(f.pushes, want, slices.Equal) {
		t.Fatalf("pushes %v, want %v", f.pushes, want)
	}
	if len(out) != 4 || out[0].ID != 2 || out[3].ID != 5 {
		t.Fatalf("outcomes %+v, want ids 2 to 5", out)
	}
	// Retain 2: ids 4 and 5 are held, 1 is not.
	add(1)
	_, err = w.Flush(context.Background())
	if err == nil || w.Pending() == 0 {
		t.Fatalf("a gap to an id the writer no longer holds: %v, %d pending", err, w.Pending())
	}
}

// Pushes from several goroutines keep their connections: a Client keeps
// more idle connections per host than http.DefaultTransport's 2.
func TestConcurrentPushesReuseConnections(t *testing.T) {
	const pushers, rounds = 8, 5
	var round atomic.Pointer[sync.WaitGroup] // every push of a round is in flight at once
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p Push
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		wg := round.Load()
		wg.Done()
		wg.Wait()
		_, res := applied(p)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := New(srv.URL)
	for r := range rounds {
		wg := new(sync.WaitGroup)
		wg.Add(pushers)
		round.Store(wg)
		var done sync.WaitGroup
		for i := range pushers {
			done.Go(func() {
				p := Push{ClientGroup: "g", Mutations: []Mutation{{Client: fmt.Sprint(i), ID: uint64(r + 1), Name: "x", Args: json.RawMessage(`{}`)}}}
				if _, err := c.Push(context.Background(), "acme", "p", p, PushOptions{}); err != nil {
					t.Error(err)
				}
			})
		}
		done.Wait()
	}
	// 8 connections at least; with 2 kept idle, 6 more in every round.
	if n := conns.Load(); n > 2*pushers {
		t.Fatalf("%d connections for %d rounds of %d concurrent pushes", n, rounds, pushers)
	}
}

// ledger is a Canon in miniature for Writers: it keeps each client's last
// id, applies the next one, answers the ones at or below it duplicate,
// and serves the read API's last id of a client.
type ledger struct {
	mu   sync.Mutex
	last map[string]uint64
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		_ = json.NewEncoder(w).Encode(map[string]any{"client": r.PathValue("client"), "branch": "main", "lastMutationID": l.last[r.PathValue("client")]})
		return
	}
	var p Push
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	var res Result
	for _, m := range p.Mutations {
		wr := Written{Client: m.Client, ID: m.ID}
		res.Mutations = append(res.Mutations, wr)
		o := Outcome{Written: wr, Status: Duplicate}
		switch last := l.last[m.Client]; {
		case m.ID == last+1:
			l.last[m.Client] = m.ID
			o.Status = Applied
		case m.ID > last+1:
			o.Status, o.Reason, o.ExpectedID = Rejected, "gap", last+1
		}
		res.Outcomes = append(res.Outcomes, o)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// A second Writer with the same client id, as a second run of a program
// makes, goes on from the last id Canon has: its mutations are applied,
// not answered duplicate.
func TestWriterResumesFromCanonsLastID(t *testing.T) {
	mux := http.NewServeMux()
	l := &ledger{last: map[string]uint64{}}
	mux.Handle("GET /v1/projects/acme/p/clients/{client}", l)
	mux.Handle("POST /v1/projects/acme/p/push", l)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := New(srv.URL)
	run := func(n int) []Outcome {
		t.Helper()
		w := c.Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c"})
		for i := range n {
			if _, err := w.Add("item.put", map[string]any{"collection": "t", "id": fmt.Sprint(i), "data": i}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := w.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run(2)
	out := run(3)
	if len(out) != 3 {
		t.Fatalf("second writer: %d outcomes, want 3", len(out))
	}
	for i, o := range out {
		if o.Status != Applied || o.ID != uint64(3+i) {
			t.Errorf("second writer's mutation %d: %s id %d, want applied id %d", i, o.Status, o.ID, 3+i)
		}
	}
	if l.last["c"] != 5 {
		t.Fatalf("Canon's last id of c is %d, want 5", l.last["c"])
	}
}

// The look-up goes to WithReadURL when the read API is elsewhere; a URL
// that has no read API is an error that says what to pass, and Add queues
// nothing then.
func TestWriterLastIDLookup(t *testing.T) {
	l := &ledger{last: map[string]uint64{"c": 7}}
	reads := http.NewServeMux()
	reads.Handle("GET /v1/projects/acme/p/clients/{client}", l)
	readSrv := httptest.NewServer(reads)
	defer readSrv.Close()
	pushes := http.NewServeMux()
	pushes.Handle("POST /v1/projects/acme/p/push", l)
	pushSrv := httptest.NewServer(pushes)
	defer pushSrv.Close()

	w := New(pushSrv.URL).Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c"})
	if _, err := w.Add("x", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "WithReadURL") {
		t.Fatalf("Add against a URL without the read API: %v, want an error naming WithReadURL", err)
	}
	if w.Pending() != 0 {
		t.Fatalf("%d pending after a failed Add", w.Pending())
	}

	w = New(pushSrv.URL, WithReadURL(readSrv.URL+"/")).Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c"})
	if err := w.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	if id, err := w.Add("x", json.RawMessage(`{}`)); err != nil || id != 8 {
		t.Fatalf("Add after Canon's last id 7: %d, %v; want 8", id, err)
	}
	// A LastID given is used as is.
	w = New(pushSrv.URL).Writer("acme", "p", WriterConfig{ClientGroup: "g", Client: "c", LastID: 3})
	if id, err := w.Add("x", json.RawMessage(`{}`)); err != nil || id != 4 {
		t.Fatalf("Add with LastID 3: %d, %v; want 4", id, err)
	}
}
