package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestGotodoServesAndReplaysItsMutators builds this program, serves it on
// the real broker, pushes the todo mutators with the Go client, reads the
// result back, and replays the history in memory with the same binary:
// the Go mutators are what the sequencer and the replay decide with.
func TestGotodoServesAndReplaysItsMutators(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Kafka")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := testenv.NewKafka(t)
	bin := testenv.BuildProgram(t, "github.com/canon-sync/canon/examples/gotodo")

	srv := canontest.Serve(t, ctx, k, bin, "gotodo")
	base := srv.Base
	token := srv.Token(t, auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "user:ann"}})

	pusher := srv.Pusher(token, "acme", "todo", "g1", "c1")

	pusher.Applied(t, ctx, "todo.create", map[string]any{"id": "milk", "title": "buy milk", "order": 1})
	pusher.Applied(t, ctx, "todo.create", map[string]any{"id": "bread", "title": "buy bread", "order": 2})
	pusher.Applied(t, ctx, "todo.toggle", map[string]any{"id": "milk"})
	pusher.Applied(t, ctx, "todo.rename", map[string]any{"id": "milk", "title": "buy oat milk", "from": "buy milk"})
	// A second client still saw "buy milk": its rename is refused, with
	// the title that won.
	stale := pusher.Push(t, ctx, "todo.rename", map[string]any{"id": "milk", "title": "buy soy milk", "from": "buy milk"})
	if stale.Status != client.Errored || !strings.Contains(stale.Error, `renamed to "buy oat milk" meanwhile`) {
		t.Fatalf("stale rename: %+v, want an error naming the title that won", stale)
	}
	pusher.Applied(t, ctx, "todo.move", map[string]any{"id": "bread", "order": 0.5})
	if o := pusher.Push(t, ctx, "todo.toggle", map[string]any{"id": "eggs"}); o.Status != client.Errored || !strings.Contains(o.Error, `no todo "eggs"`) {
		t.Fatalf("toggle of a missing todo: %+v", o)
	}
	// The built-ins stay available beside the application's mutators.
	pusher.Applied(t, ctx, "item.put", map[string]any{"collection": "notes", "id": "n1", "data": map[string]any{"text": "hi"}})

	milk := readTodo(t, ctx, base, token, "milk")
	if milk.Title != "buy oat milk" || !milk.Done || milk.Order != 1 || milk.Created == 0 {
		t.Fatalf("milk = %+v", milk)
	}
	if bread := readTodo(t, ctx, base, token, "bread"); bread.Order != 0.5 || bread.Done {
		t.Fatalf("bread = %+v", bread)
	}

	// The same binary replays the history deciding with its mutators: a
	// binary without them would decide todo.* as unknown mutators and
	// diverge at the first version.
	out, err := exec.CommandContext(ctx, bin, "replay", "--brokers", srv.Brokers, "--topic-prefix", srv.Prefix,
		"--project", "acme/todo", "--in-memory", "--json").Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("gotodo replay: %v\n%s\n%s", err, out, stderr)
	}
	var res struct {
		Checked       int  `json:"checked"`
		Deterministic bool `json:"deterministic"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("replay output %q: %v", out, err)
	}
	if !res.Deterministic || res.Checked != int(pusher.Last) {
		t.Fatalf("replay: %s, want deterministic over %d versions", out, pusher.Last)
	}
}

func readTodo(t *testing.T, ctx context.Context, base, token, id string) Todo {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/projects/acme/todo/items/"+Collection+"/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data Todo `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read todo %s: %s", id, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(fmt.Errorf("read todo %s: %w", id, err))
	}
	return body.Data
}
