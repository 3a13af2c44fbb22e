package readapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/producer"
)

// pipeline is Canon's write and read path in one process over the real
// broker: canontest's stack with a producer and the read API on one HTTP
// server.
type pipeline struct {
	env
	names kafka.TopicNames
	kcfg  kafka.ClientConfig
	url   string
}

func startPipeline(t *testing.T, partitions int32) *pipeline {
	t.Helper()
	var srv *Server
	s := canontest.Start(t, canontest.Options{Partitions: partitions, StoreCacheSize: 4 << 20,
		Producer: &producer.Config{Partitions: partitions},
		Mount: func(s *canontest.Stack, mux *http.ServeMux) {
			var err error
			if srv, err = New(Config{Store: s.Store, Keys: s.Keys.VerifyOnly()}); err != nil {
				t.Fatal(err)
			}
			srv.Mount(mux)
		}})
	return &pipeline{
		env:   env{t: t, st: s.Store, keys: s.Keys, srv: srv, api: newAPIClient(t, s.URL), off: map[int32]int64{}},
		names: s.Topics, kcfg: s.Kafka, url: s.URL,
	}
}

// nodeProject prepares readapi/testdata/replicache (see testenv.NPMProject).
func nodeProject(t *testing.T) string {
	t.Helper()
	return testenv.NPMProject(t, filepath.Join("testdata", "replicache"), "replicache")
}

// Two stock Replicache clients (the replicache npm package, in Node) edit
// one project through Canon: push to the producer, pull from the read API.
// Both end with no pending mutation and exactly Canon's state.
func TestReplicacheClientsConverge(t *testing.T) {
	dir := nodeProject(t)
	pl := startPipeline(t, 3)
	tokA := pl.token("user:ann", []string{"doc"}, auth.ScopeWrite)
	tokB := pl.token("user:bob", []string{"doc"}, auth.ScopeWrite)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sync.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CANON_URL="+pl.url, "CANON_PROJECT=acme/doc", "CANON_TOKEN_A="+tokA, "CANON_TOKEN_B="+tokB)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node sync.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.Bytes(), stderr.Bytes())
	}
	var out struct {
		A, B               map[string]any
		PendingA, PendingB int
		ClientA, ClientB   string
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node's output %q: %v (stderr: %s)", stdout.Bytes(), err, stderr.Bytes())
	}

	// Canon's state, as Replicache keys.
	r := pl.api.get("/v1/projects/acme/doc?items=full", tokA)
	var st StateResponse
	r.json(t, &st)
	want := map[string]any{}
	for name, v := range st.Scalars {
		want[ScalarKeyPrefix+name] = decodeAny(t, v)
	}
	for coll, items := range st.Collections {
		for _, it := range items {
			want[ItemKey(coll, it.ID)] = decodeAny(t, it.Data)
		}
	}
	if out.PendingA != 0 || out.PendingB != 0 || !reflect.DeepEqual(out.A, want) || !reflect.DeepEqual(out.B, want) {
		t.Fatalf("Replicache views\n a %v\n b %v\nCanon at version %d\n   %v", out.A, out.B, st.Version, want)
	}
	// What the edits must have made: both patches of the shared note
	// kept, the deleted item gone.
	shared, _ := want["notes/shared"].(map[string]any)
	text, _ := want["docs/text"].(map[string]any)
	if shared["a"] != 1.0 || shared["b"] != 2.0 || want["notes/gone"] != nil || want["_scalar/name"] != "Canon + Replicache" || text["body"] != "hello world" {
		t.Fatalf("Canon's state %v", want)
	}
	// Every mutation was decided and applied: a made 7, b 4.
	for client, n := range map[string]uint64{out.ClientA: 7, out.ClientB: 4} {
		var cl ClientResponse
		pl.api.get("/v1/projects/acme/doc/clients/"+client, tokA).json(t, &cl)
		if cl.LastMutationID != n {
			t.Errorf("client %s: last id %d, want %d", client, cl.LastMutationID, n)
		}
		for id := uint64(1); id <= n; id++ {
			var m MutationResponse
			pl.api.get(fmt.Sprintf("/v1/projects/acme/doc/clients/%s/mutations/%d", client, id), tokA).json(t, &m)
			if !m.Applied {
				t.Errorf("client %s mutation %d: %+v", client, id, m)
			}
		}
	}
}

func decodeAny(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A stock Replicache client that edited offline past one push's limits
// (1,100 small mutations, 45 of 100 KB) drains its backlog once online:
// each push takes what fits, the next carries the rest.
func TestReplicacheOfflineBacklogDrains(t *testing.T) {
	dir := nodeProject(t)
	pl := startPipeline(t, 3)
	tok := pl.token("user:ann", []string{"doc"}, auth.ScopeWrite)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "backlog.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CANON_URL="+pl.url, "CANON_PROJECT=acme/doc", "CANON_TOKEN="+tok)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node backlog.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.Bytes(), stderr.Bytes())
	}
	var out struct {
		Offline, Rounds, Keys int
		ClientID              string
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node's output %q: %v (stderr: %s)", stdout.Bytes(), err, stderr.Bytes())
	}
	t.Logf("%d offline mutations drained in %d push and pull rounds", out.Offline, out.Rounds)
	const total = 1100 + 45
	if out.Offline != total || out.Keys != total || out.Rounds < 3 {
		t.Fatalf("%+v: want %d offline mutations, all in the view, in at least 3 pushes", out, total)
	}
	var cl ClientResponse
	pl.api.get("/v1/projects/acme/doc/clients/"+out.ClientID, tok).json(t, &cl)
	if cl.LastMutationID != total {
		t.Fatalf("client %s: last id %d, want %d", out.ClientID, cl.LastMutationID, total)
	}
	var st StateResponse
	pl.api.get("/v1/projects/acme/doc", tok).json(t, &st)
	if len(st.Collections["small"]) != 1100 || len(st.Collections["large"]) != 45 {
		t.Fatalf("Canon holds %d small and %d large items", len(st.Collections["small"]), len(st.Collections["large"]))
	}
}
