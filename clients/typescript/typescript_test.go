// Package typescript holds the Go tests that drive Canon's TypeScript
// client (@canon/client, in this folder): its own type-check and node
// tests, and the client against a real Canon stack in Node.
package typescript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/live"
	"github.com/canon-sync/canon/readapi"
)

// project prepares the npm project (npm ci when node_modules lacks
// typescript) and returns its directory.
func project(t *testing.T) string {
	t.Helper()
	return testenv.NPMProject(t, ".", "typescript")
}

// npm runs an npm script in dir and returns its output; a failure fails
// the test with the output.
func npm(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("npm %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// The client's strict type-check and its node:test suite (against a fake
// Canon: rebase of 1,000 pending mutations, reset, gap, backoff, storage,
// reload during a push, the HTTP fallback), and src/wire.ts checked
// against docs/openapi.yaml.
func TestNodeUnit(t *testing.T) {
	dir := project(t)
	out := npm(t, dir, nil, "test", "--silent")
	// node:test's summary: # tests, # pass, # fail …
	for _, line := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("# ")) && !bytes.HasPrefix(line, []byte("# Subtest")) {
			t.Logf("%s", line)
		}
	}
}

func lastLines(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}

// stack is what canon dev serves a browser or Node app on one address:
// the producer's HTTP push, the read API, and the websocket with pushes,
// over a real broker.
func stack(t *testing.T, extra ...func(mux *http.ServeMux)) *canontest.Stack {
	t.Helper()
	return canontest.Start(t, canontest.Options{Partitions: 2, Producer: &producer.Config{Partitions: 2},
		Mount: func(s *canontest.Stack, mux *http.ServeMux) {
			for _, f := range extra {
				f(mux)
			}
			ra, err := readapi.New(readapi.Config{Store: s.Store, Keys: s.Keys.VerifyOnly()})
			if err != nil {
				t.Fatal(err)
			}
			ra.Mount(mux)
			ws, err := live.New(live.Config{Store: s.Store, Kafka: s.Kafka, Topics: s.Topics, Keys: s.Keys.VerifyOnly(), Pusher: s.Producer})
			if err != nil {
				t.Fatal(err)
			}
			ws.Mount(mux)
			s.Go("live", ws.Run)
		}})
}

func token(t *testing.T, s *canontest.Stack, subject string) string {
	t.Helper()
	c := auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite}}
	c.Subject = subject
	return s.Token(t, c, time.Hour)
}

// e2eResult is what test/e2e.ts prints.
type e2eResult struct {
	Scenario string            `json:"scenario"`
	Views    []json.RawMessage `json:"views"`
	Clients  []string          `json:"clients"`
	Counts   map[string]int    `json:"counts"`
	Outcomes []string          `json:"outcomes"`
	Figures  map[string]any    `json:"figures"`
}

func runE2E(t *testing.T, dir string, s *canontest.Stack, scenario, project string, extra ...string) e2eResult {
	t.Helper()
	env := append([]string{"CANON_URL=" + s.URL, "CANON_PROJECT=" + project, "CANON_SCENARIO=" + scenario,
		"CANON_TOKEN_A=" + token(t, s, "user:ann"), "CANON_TOKEN_B=" + token(t, s, "user:bob"), "CANON_DIR=" + t.TempDir()}, extra...)
	out := npm(t, dir, env, "run", "--silent", "e2e")
	var r e2eResult
	if err := json.Unmarshal(lastLines(out, 1), &r); err != nil {
		t.Fatalf("e2e output %q: %v", out, err)
	}
	return r
}

// canonView is Canon's latest state in the shape test/e2e.ts prints a
// client's view: scalars and collection/id -> data.
func canonView(t *testing.T, s *canontest.Stack, project string) json.RawMessage {
	t.Helper()
	var st readapi.StateResponse
	get(t, s, "/v1/projects/acme/"+project+"?items=full", &st)
	items := map[string]json.RawMessage{}
	for c, list := range st.Collections {
		for _, it := range list {
			items[c+"/"+it.ID] = it.Data
		}
	}
	scalars := st.Scalars
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	b, err := json.Marshal(map[string]any{"version": st.Version, "scalars": scalars, "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return normalize(t, b)
}

func normalize(t *testing.T, b []byte) json.RawMessage {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Two clients in Node edit one project concurrently through a real Canon
// (websocket pushes, versions, blobs by hash): both end with no pending
// mutation and exactly Canon's state; a mutation Canon refuses is an
// error outcome with its code and its optimistic change rolled back.
func TestClientsConvergeOnCanon(t *testing.T) {
	dir := project(t)
	s := stack(t)
	r := runE2E(t, dir, s, "converge", "conv")
	want := canonView(t, s, "conv")
	for i, v := range r.Views {
		if got := normalize(t, v); !bytes.Equal(got, want) {
			t.Errorf("client %d's view\n %s\nCanon's\n %s", i, got, want)
		}
	}
	if len(r.Views) != 2 {
		t.Fatalf("%d views", len(r.Views))
	}
	wantOutcomes := []string{"error:not_found", "rolled back"}
	if fmt.Sprint(r.Outcomes) != fmt.Sprint(wantOutcomes) {
		t.Errorf("outcomes %v, want %v", r.Outcomes, wantOutcomes)
	}
}

// A client that stops in the middle of pushing 300 mutations (its file
// storage holds them) is started again from the same file: every mutation
// is applied exactly once, none lost, none duplicated, and the restarted
// client learns each outcome.
func TestReloadDuringPushOnCanon(t *testing.T) {
	dir := project(t)
	s := stack(t)
	r := runE2E(t, dir, s, "reload", "reload")
	client := r.Clients[0]
	var cl readapi.ClientResponse
	get(t, s, "/v1/projects/acme/reload/clients/"+client, &cl)
	if cl.LastMutationID != 300 {
		t.Fatalf("Canon's last id of %s is %d, want 300 (%+v)", client, cl.LastMutationID, r)
	}
	for _, id := range []int{1, 150, 300} {
		var m readapi.MutationResponse
		get(t, s, fmt.Sprintf("/v1/projects/acme/reload/clients/%s/mutations/%d", client, id), &m)
		if m.Status != "applied" {
			t.Errorf("mutation %d: %+v", id, m)
		}
	}
	want := canonView(t, s, "reload")
	if got := normalize(t, r.Views[0]); !bytes.Equal(got, want) {
		t.Errorf("the restarted client's view\n %s\nCanon's\n %s", got, want)
	}
	if r.Counts["count"] != 300 || r.Counts["learned"] != 300 {
		t.Errorf("counts %v: want the counter at 300 and 300 outcomes learned across the two runs", r.Counts)
	}
	t.Logf("first run pushed before stopping: %v; outcomes learned by run 1 and 2: %v", r.Counts["pushedBeforeStop"], r.Counts["learned"])
}

func get(t *testing.T, s *canontest.Stack, path string, v any) {
	t.Helper()
	canontest.GetJSON(t, context.Background(), s.URL+path, token(t, s, "user:ann"), v)
}
