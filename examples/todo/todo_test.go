// Package todo_test drives the TypeScript todo example end to end on a
// real broker, as the README shows it: canon serve, canon mutators
// deploy of mutators.ts, pushes with the Go client, reads, an in-memory
// replay under the recorded bundle, and a rebase under changed logic.
package todo_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var deployed = regexp.MustCompile(`deployed bundle ([0-9a-f]{64}) `)

func TestTodoExampleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Kafka")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := testenv.NewKafka(t)
	bin := testenv.BuildCanon(t)

	srv := canontest.Serve(t, ctx, k, bin, "todo")
	base := srv.Base
	token := srv.Token(t, auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeAdmin},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "user:ann"}})

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "CANON_TOKEN="+token)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("canon %s: %v\n%s\n%s", args[0], err, out, ee.Stderr)
			}
			t.Fatalf("canon %s: %v", args[0], err)
		}
		return string(out)
	}

	// Deploy the TypeScript mutators: built with what they import, checked
	// by the server, activated by the sequencer before the command returns.
	out := run("mutators", "deploy", "--url", base, "--org", "acme", "--project", "todo", "mutators.ts")
	dm := deployed.FindStringSubmatch(out)
	if dm == nil || !strings.Contains(out, "active in acme/todo") {
		t.Fatalf("deploy said %q", out)
	}
	hash := dm[1]
	js, err := os.ReadFile("mutators.js")
	if err != nil {
		t.Fatal(err)
	}
	if schemas.BundleHash(js) != hash {
		t.Errorf("the deployed build of mutators.ts has hash %s, mutators.js %s: rebuild mutators.js", hash, schemas.BundleHash(js))
	}
	// The org's deployments: acme/todo's own, on its partition (the
	// node serves both).
	list := run("mutators", "list", "--url", base, "--org", "acme")
	if !strings.Contains(list, "org acme, partitions 0,1\n") || !regexp.MustCompile(`(?m)^acme/todo +`+hash+` `).MatchString(list) {
		t.Errorf("mutators list said %q, want acme/todo with %s", list, hash)
	}

	pusher := srv.Pusher(token, "acme", "todo", "g1", "c1")
	pusher.Applied(t, ctx, "todo.create", map[string]any{"id": "milk", "title": "buy milk", "order": 1})
	pusher.Applied(t, ctx, "todo.create", map[string]any{"id": "bread", "title": "buy bread", "order": 2})
	pusher.Applied(t, ctx, "todo.toggle", map[string]any{"id": "milk"})
	pusher.Applied(t, ctx, "todo.rename", map[string]any{"id": "milk", "title": "buy oat milk", "from": "buy milk"})
	stale := pusher.Push(t, ctx, "todo.rename", map[string]any{"id": "milk", "title": "buy soy milk", "from": "buy milk"})
	if stale.Status != client.Errored || stale.Code != "rename_conflict" || !strings.Contains(stale.Error, `renamed to "buy oat milk" meanwhile`) {
		t.Fatalf("stale rename: %+v, want an error naming the title that won", stale)
	}
	pusher.Applied(t, ctx, "todo.move", map[string]any{"id": "bread", "column": "doing", "order": 0.5})
	if o := pusher.Push(t, ctx, "todo.create", map[string]any{"id": "milk", "title": "again"}); o.Status != client.Errored || o.Code != "todo_exists" || !strings.Contains(o.Error, "exists already") {
		t.Fatalf("create of an existing todo: %+v", o)
	}
	pusher.Applied(t, ctx, "item.put", map[string]any{"collection": "notes", "id": "n1", "data": map[string]any{"text": "hi"}})

	var milk struct {
		Data struct {
			Title string `json:"title"`
			Done  bool   `json:"done"`
		} `json:"data"`
	}
	canontest.GetJSON(t, ctx, base+"/v1/projects/acme/todo/items/todos/milk", token, &milk)
	if milk.Data.Title != "buy oat milk" || !milk.Data.Done {
		t.Fatalf("milk = %+v", milk.Data)
	}
	var vs struct {
		Versions []schemas.Version `json:"versions"`
	}
	canontest.GetJSON(t, ctx, base+"/v1/projects/acme/todo/versions?from=1", token, &vs)
	for _, v := range vs.Versions {
		want := hash
		if v.Mutations[0].Name == "item.put" {
			want = ""
		}
		if v.Bundle != want {
			t.Errorf("version %d (%s) names bundle %q, want %q", v.Version, v.Mutations[0].Name, v.Bundle, want)
		}
	}

	// The replay decides every version again with the bundle it recorded
	// and reproduces every state hash.
	var rep struct {
		Checked       int  `json:"checked"`
		Deterministic bool `json:"deterministic"`
	}
	out = run("replay", "--brokers", srv.Brokers, "--topic-prefix", srv.Prefix, "--project", "acme/todo", "--in-memory", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Deterministic || rep.Checked != int(pusher.Last) {
		t.Fatalf("replay: %s (%v), want deterministic over %d versions", out, err, pusher.Last)
	}

	// What if renames had no conflict rule? A rebase under that bundle
	// applies the stale rename, and says so.
	lenient := strings.Replace(string(js), "if (t.title !== from) {", "if (false) {", 1)
	if lenient == string(js) {
		t.Fatal("mutators.js has no rename conflict rule to take out")
	}
	alt := filepath.Join(t.TempDir(), "lenient.js")
	if err := os.WriteFile(alt, []byte(lenient), 0o600); err != nil {
		t.Fatal(err)
	}
	var reb struct {
		Conflicts []struct {
			Mutation  struct{ Name string } `json:"mutation"`
			Status    string                `json:"status"`
			NewStatus string                `json:"newStatus"`
		} `json:"conflicts"`
	}
	out = run("rebase", "--brokers", srv.Brokers, "--topic-prefix", srv.Prefix, "--project", "acme/todo", "--from", "3",
		"--onto", "main@2", "--into", "lenient", "--dry-run", "--mutators", alt, "--json")
	if err := json.Unmarshal([]byte(out), &reb); err != nil {
		t.Fatalf("rebase output %q: %v", out, err)
	}
	if len(reb.Conflicts) != 1 || reb.Conflicts[0].Mutation.Name != "todo.rename" || reb.Conflicts[0].Status != "error" || reb.Conflicts[0].NewStatus != "applied" {
		t.Fatalf("rebase under the lenient bundle: %s, want the stale rename applied", out)
	}
}
