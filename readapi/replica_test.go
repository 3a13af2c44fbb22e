package readapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// push sends mutations of one client over the producer's HTTP endpoint.
func (pl *pipeline) push(tok, project, branch, client string, first uint64, ms ...string) {
	pl.t.Helper()
	var parts []string
	for i, m := range ms {
		name, args, _ := strings.Cut(m, " ")
		parts = append(parts, fmt.Sprintf(`{"client":%q,"id":%d,"name":%q,"args":%s}`, client, first+uint64(i), name, args))
	}
	body := fmt.Sprintf(`{"branch":%q,"clientGroup":"g-%s","mutations":[%s]}`, branch, client, strings.Join(parts, ","))
	req, _ := http.NewRequest(http.MethodPost, pl.url+"/v1/projects/acme/"+project+"/push", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pl.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pl.t.Fatalf("push to %s: %d", project, resp.StatusCode)
	}
}

// On the real broker: a sequencer and a read replica of a subset of the
// partitions. The replica, started halfway, restarted and fed more,
// holds for every project of its partitions the sequencer's versions and
// state hashes, is ready once caught up, and refuses the other
// partitions' projects with 421.
func TestReplicaMatchesSequencer(t *testing.T) {
	const partitions = 4
	pl := startPipeline(t, partitions)
	tok := pl.token("user:w", []string{"*"}, auth.ScopeWrite)
	served := []int32{1, 2}
	var projects []string
	for p := range int32(partitions) {
		projects = append(projects, projectIn(p, 0), projectIn(p, 1))
	}
	want := map[string]uint64{} // project → versions of main
	round := func(r int) {
		for i, project := range projects {
			client := fmt.Sprintf("c%d", i)
			first := uint64(3*r + 1)
			ms := []string{
				fmt.Sprintf(`item.put {"collection":"notes","id":"n%d","data":{"round":%d}}`, r, r),
				fmt.Sprintf(`item.patch {"collection":"notes","id":"n%d","data":{"by":%q}}`, r, client),
				`project.set {"name":"` + project + `"}`,
			}
			if r > 0 {
				ms[2] = fmt.Sprintf(`item.delete {"collection":"notes","id":"n%d"}`, r-1)
			}
			pl.push(tok, project, "main", client, first, ms...)
			want[project] += 3
		}
	}
	seqCaughtUp := func() {
		canontest.WaitFor(t, 2*time.Minute, "the sequencer", func() (bool, error) {
			for _, project := range projects {
				h, err := pl.st.Head("acme", project, "main")
				if err != nil {
					return false, err
				}
				if h.Version != want[project] {
					return false, canontest.Pending("%s at version %d of %d", project, h.Version, want[project])
				}
			}
			return true, nil
		})
	}

	round(0)
	seqCaughtUp()
	rst, err := store.Open(store.Config{Dir: t.TempDir(), Partitions: partitions, CacheSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	start := func() (*Replica, func()) {
		kcfg := pl.kcfg
		kcfg.ClientID = "replica-test"
		rep, err := NewReplica(ReplicaConfig{Kafka: kcfg, Topics: pl.names, Store: rst, Partitions: served})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rep.Run(ctx) }()
		return rep, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica: %v", err)
			}
		}
	}
	check := func(rep *Replica) {
		t.Helper()
		canontest.WaitFor(t, time.Minute, "replica readiness", func() (bool, error) {
			if err := rep.Ready(context.Background()); err != nil {
				return false, canontest.Pending("%v", err)
			}
			return true, nil
		})
		for _, project := range projects {
			p := rst.PartitionOf("acme", project)
			if p != 1 && p != 2 {
				if h, _ := rst.Head("acme", project, "main"); h.Version != 0 {
					t.Fatalf("the replica holds %s of partition %d", project, p)
				}
				continue
			}
			canontest.WaitFor(t, time.Minute, "replica of "+project, func() (bool, error) {
				h, err := rst.Head("acme", project, "main")
				if err == nil && h.Version == want[project] {
					return true, nil
				}
				return false, canontest.Pending("version %d of %d (%v)", h.Version, want[project], err)
			})
			vs, err := pl.st.Versions("acme", project, "main", 1, 1000)
			if err != nil {
				t.Fatal(err)
			}
			rvs, err := rst.Versions("acme", project, "main", 1, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(vs, rvs) {
				t.Fatalf("%s: the replica's versions differ from the sequencer's", project)
			}
			for v := uint64(1); v <= want[project]; v++ {
				a, err1 := pl.st.StateAt("acme", project, "main", v, true)
				b, err2 := rst.StateAt("acme", project, "main", v, true)
				if err1 != nil || err2 != nil || a.StateHash != b.StateHash || !reflect.DeepEqual(a, b) {
					t.Fatalf("%s at %d: sequencer %s, replica %s (%v, %v)", project, v, a.StateHash, b.StateHash, err1, err2)
				}
			}
		}
	}

	// Records no sequencer wrote, produced to a served partition of the
	// changelog by hand: the replica skips them instead of stalling.
	foreign := func(version uint64) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(pl.kcfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		project := projectIn(1, 0)
		forged, err := schemas.EncodeVersion(&schemas.Version{Org: "acme", Project: project, Branch: "main", Version: version, Parent: version - 1,
			TS: time.Now().UnixMilli(), StateHash: strings.Repeat("0", 64), LastIDs: map[string]uint64{"mallory": 1},
			Mutations: []schemas.Outcome{{ClientGroup: "g-mallory", Client: "mallory", ID: 1, Name: "item.delete", Status: schemas.StatusApplied,
				Args: json.RawMessage(`{"collection":"notes","id":"n0"}`)}}}, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		h := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}
		key := schemas.ProjectKey("acme", project)
		for _, v := range [][]byte{[]byte("not json"), forged} {
			r := &kgo.Record{Topic: pl.names.Versions, Key: key, Value: v, Partition: 1, Headers: h}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	foreign(want[projectIn(1, 0)] + 5)

	rep, stop := start()
	round(1) // while the replica catches up
	seqCaughtUp()
	check(rep)
	if n := rep.Skipped(); n != 2 {
		t.Errorf("the replica skipped %d foreign records, want 2", n)
	}
	stop()
	foreign(want[projectIn(1, 0)] + 5) // after the stored offset: a rebuild, then skipped
	round(2)                           // while it is down: it resumes from its stored offsets
	seqCaughtUp()
	rep, stop = start()
	defer stop()
	check(rep)
	// The undecodable record is skipped at once; the forged version then
	// fails on the stored state, which is rebuilt from the start, where
	// all four are skipped.
	if n := rep.Skipped(); n != 5 {
		t.Errorf("the replica skipped %d foreign records around its rebuild, want 1+4", n)
	}

	// Reads from the replica's store; other partitions' projects are 421.
	srv, err := New(Config{Store: rst, Keys: pl.keys.VerifyOnly(), Partitions: served})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	api := newAPIClient(t, hs.URL)
	for _, project := range projects {
		r := api.get("/v1/projects/acme/"+project, tok)
		p := rst.PartitionOf("acme", project)
		if p == 1 || p == 2 {
			var st StateResponse
			r.json(t, &st)
			if r.status != 200 || st.Version != want[project] {
				t.Fatalf("%s from the replica: %d %s", project, r.status, r.body)
			}
		} else if r.status != http.StatusMisdirectedRequest || !strings.Contains(string(r.body), fmt.Sprintf("partition %d ", p)) {
			t.Fatalf("%s of partition %d from the replica: %d %s", project, p, r.status, r.body)
		}
	}
}

// On the real broker: a mutation the sequencer rejected is reported
// rejected, with its reason, by the sequencer's store and by a read
// replica's, which learns it from canon.rejected; before, both said
// pending forever.
func TestRejectedMutationStatus(t *testing.T) {
	pl := startPipeline(t, 2)
	tok := pl.token("user:w", []string{"*"}, auth.ScopeWrite)
	rst, err := store.Open(store.Config{Dir: t.TempDir(), Partitions: 2, CacheSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	kcfg := pl.kcfg
	kcfg.ClientID = "replica-rejections"
	rep, err := NewReplica(ReplicaConfig{Kafka: kcfg, Topics: pl.names, Store: rst, Rejections: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica: %v", err)
		}
	}()

	pl.push(tok, "gaps", "main", "g1", 3, `item.put {"collection":"t","id":"a","data":1}`) // a gap: 1 is expected
	for name, st := range map[string]*store.Store{"sequencer": pl.st, "replica": rst} {
		canontest.WaitFor(t, time.Minute, "the rejection in the "+name+"'s store", func() (bool, error) {
			rej, ok, err := st.Rejection("acme", "gaps", "main", "g1", 3)
			if err != nil || ok {
				return ok, err
			}
			return false, canontest.Pending("%+v", rej)
		})
		srv, err := New(Config{Store: st, Keys: pl.keys.VerifyOnly()})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		srv.Mount(mux)
		hs := httptest.NewServer(mux)
		var m MutationResponse
		r := newAPIClient(t, hs.URL).get("/v1/projects/acme/gaps/clients/g1/mutations/3", tok)
		hs.Close()
		r.json(t, &m)
		if r.status != 200 || m.Status != StatusRejected || m.Reason != schemas.ReasonGap || m.ExpectedID != 1 {
			t.Fatalf("status from the %s: %d %s; want rejected, gap, expected 1", name, r.status, r.body)
		}
	}
}
