package sequencer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// env is a broker with Canon's topics and a producer of raw records.
type env struct {
	brokers []string
	names   kafka.TopicNames
	parts   int32
	cl      *kgo.Client
}

func newEmbeddedEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(emb.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := kafka.EnsureTopics(ctx, cl, kafka.TopicsConfig{Partitions: partitions}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{brokers: emb.Brokers(), names: info.Names, parts: partitions, cl: cl}
}

// push produces a mutation record the way the ingest does: keyed by the
// project, on Java's partition, with the schema header.
func (e *env) push(t *testing.T, m *schemas.Mutation) {
	t.Helper()
	v, err := schemas.EncodeMutation(m, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	key := schemas.ProjectKey(m.Org, m.Project)
	e.raw(t, &kgo.Record{Key: key, Value: v, Partition: schemas.Partition(key, e.parts),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}})
}

func (e *env) raw(t *testing.T, r *kgo.Record) {
	t.Helper()
	r.Topic = e.names.Mutations
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func put(org, project, client string, id uint64, item string, data string) *schemas.Mutation {
	args := fmt.Sprintf(`{"collection":"tasks","id":%q,"data":%s}`, item, data)
	return &schemas.Mutation{Org: org, Project: project, Branch: "main", ClientGroup: "g-" + client, Client: client,
		ID: id, Name: "item.put", Args: json.RawMessage(args)}
}

func startSequencer(t *testing.T, ctx context.Context, e *env, dir string) (*sequencer.Sequencer, *store.Store, chan error) {
	t.Helper()
	st, err := store.Open(store.Config{Dir: dir, Partitions: e.parts})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := sequencer.New(sequencer.Config{
		Kafka:          kafka.ClientConfig{Brokers: e.brokers, ClientID: "test-sequencer"},
		Topics:         e.names,
		Store:          st,
		SessionTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- seq.Run(ctx) }()
	return seq, st, done
}

func TestSequencerOutcomesAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEmbeddedEnv(t, 3)
	dir := filepath.Join(t.TempDir(), "store")
	sctx, scancel := context.WithCancel(ctx)
	seq, st, done := startSequencer(t, sctx, e, dir)

	for i := uint64(1); i <= 10; i++ {
		e.push(t, put("acme", "roadmap", "alice", i, fmt.Sprintf("t%d", i%3), fmt.Sprintf(`{"n":%d}`, i)))
		e.push(t, put("acme", "budget", "bob", i, "b", fmt.Sprintf(`{"n":%d}`, i)))
	}
	e.push(t, put("acme", "roadmap", "alice", 5, "dup", `{}`))                   // duplicate
	e.push(t, put("acme", "roadmap", "alice", 13, "gap", `{}`))                  // gap: expects 11
	e.raw(t, &kgo.Record{Key: []byte("acme/roadmap"), Value: []byte("not json"), // undecodable
		Partition: schemas.Partition([]byte("acme/roadmap"), 3),
		Headers:   []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}})
	e.raw(t, &kgo.Record{Key: []byte("acme/roadmap"), Value: []byte("{}"), Partition: schemas.Partition([]byte("acme/roadmap"), 3)}) // no schema
	e.push(t, &schemas.Mutation{Org: "acme", Project: "roadmap", Branch: "main", ClientGroup: "g-alice", Client: "alice",
		ID: 11, Name: "no.such.mutator", Args: json.RawMessage(`{}`)}) // error outcome, still a version
	e.push(t, put("acme", "roadmap", "alice", 12, "t1", `{"last":true}`))

	canontest.Wait(t, ctx, "all versions in the store", func() (bool, error) {
		h1, err := st.Head("acme", "roadmap", "main")
		if err != nil {
			return false, err
		}
		h2, err := st.Head("acme", "budget", "main")
		return h1.Version == 12 && h2.Version == 10, err
	})
	canontest.Wait(t, ctx, "ready", func() (bool, error) { return seq.Ready(ctx) == nil, nil })

	// The changelog: contiguous versions per project, each mutation once.
	mem := modeltest.NewMemState()
	var chunks []schemas.Chunk
	seen := map[string]uint64{}
	for _, r := range canontest.ReadTopic(t, e.brokers, e.names.Versions) {
		switch canontest.Header(r, schemas.HeaderSchema) {
		case schemas.SchemaChunkV1:
			c, err := schemas.DecodeChunk(schemas.SchemaChunkV1, canontest.Header(r, schemas.HeaderChunkHash), r.Key, r.Value, schemas.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, *c)
		case schemas.SchemaVersionV1:
			v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			key := v.Org + "/" + v.Project + "@" + v.Branch
			if v.Version != seen[key]+1 {
				t.Fatalf("%s: version %d follows %d", key, v.Version, seen[key])
			}
			seen[key] = v.Version
			if err := mem.Apply(v, chunks); err != nil {
				t.Fatal(err)
			}
			chunks = nil
		default:
			t.Fatalf("unexpected record in the changelog: %q", canontest.Header(r, schemas.HeaderSchema))
		}
	}
	if seen["acme/roadmap@main"] != 12 || seen["acme/budget@main"] != 10 {
		t.Fatalf("versions: %v", seen)
	}
	v11, ok := mem.Version("acme", "roadmap", "main", 11)
	if !ok || v11.Mutations[0].Status != schemas.StatusError {
		t.Fatalf("version 11 should record the unknown mutator as an error: %+v", v11)
	}

	// The dead letters: the gap with the expected id, the undecodable
	// value and the record without a schema.
	reasons := map[string]int{}
	for _, r := range canontest.ReadTopic(t, e.brokers, e.names.Rejected) {
		rej, err := schemas.DecodeRejected(schemas.SchemaRejectedV1, r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		reasons[rej.Reason]++
		if rej.Reason == schemas.ReasonGap && rej.ExpectedID != 11 {
			t.Fatalf("gap expects %d, want 11", rej.ExpectedID)
		}
	}
	if reasons[schemas.ReasonGap] != 1 || reasons[schemas.ReasonUndecodable] != 1 || reasons[schemas.ReasonUnknownSchema] != 1 || len(reasons) != 3 {
		t.Fatalf("rejected reasons %v", reasons)
	}

	// The store equals a replay of the changelog.
	for _, proj := range []string{"roadmap", "budget"} {
		want, _ := mem.Head("acme", proj, "main")
		got, _ := st.Head("acme", proj, "main")
		if want.State != got.State || want.Version != got.Version {
			t.Fatalf("%s: store head %d differs from the changelog replay %d", proj, got.Version, want.Version)
		}
	}

	// Stop, delete the store, start again: the restore rebuilds it from
	// the changelog, and new mutations continue the versions.
	scancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st.Close()
	sctx, scancel = context.WithCancel(ctx)
	defer scancel()
	dir2 := filepath.Join(t.TempDir(), "store2")
	seq2, st2, done2 := startSequencer(t, sctx, e, dir2)

	e.push(t, put("acme", "roadmap", "alice", 13, "t2", `{"after":"restore"}`))
	canontest.Wait(t, ctx, "version 13 after the restore", func() (bool, error) {
		h, err := st2.Head("acme", "roadmap", "main")
		return h.Version == 13, err
	})
	// The restore found the group's committed offsets past the changelog's
	// last source: nothing was reset.
	if n := testutil.ToFloat64(sequencer.MetricsOf(seq2).OffsetBehind); n != 0 {
		t.Fatalf("restore reported the input offset behind %v times", n)
	}
	h, _ := st2.Head("acme", "budget", "main")
	want, _ := mem.Head("acme", "budget", "main")
	if h.State != want.State || h.Version != 10 {
		t.Fatalf("restored budget head %d differs from the changelog", h.Version)
	}
	scancel()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	st2.Close()

	// The group's offsets are deleted (an operator's reset): a new instance
	// consumes canon.mutations from the start again. The restore notices,
	// and nothing decided before is decided again: no new version, no new
	// rejection (the gap, the undecodable record and the one without a
	// schema would be rejected again), no duplicate counted.
	adm := kadm.NewClient(e.cl)
	resp, err := adm.DeleteOffsets(ctx, sequencer.DefaultGroup, kadm.TopicsSet{e.names.Mutations: {0: {}, 1: {}, 2: {}}})
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel = context.WithCancel(ctx)
	defer scancel()
	seq3, st3, done3 := startSequencer(t, sctx, e, filepath.Join(t.TempDir(), "store3"))
	defer func() { scancel(); <-done3; st3.Close() }()
	e.push(t, put("acme", "budget", "bob", 11, "b", `{"after":"reset"}`))
	canontest.Wait(t, ctx, "version 11 of budget after the reset", func() (bool, error) {
		h, err := st3.Head("acme", "budget", "main")
		return h.Version == 11, err
	})
	if n := testutil.ToFloat64(sequencer.MetricsOf(seq3).OffsetBehind); n == 0 {
		t.Fatal("the restore did not notice the deleted group offsets")
	}
	// Every earlier record is skipped: the 17 of roadmap's partition
	// (alice's 1..13, the resent 5, the gap, the undecodable one, the one
	// without a schema) and bob's 10 on budget's.
	canontest.Wait(t, ctx, "the earlier records skipped", func() (bool, error) {
		return testutil.ToFloat64(sequencer.MetricsOf(seq3).InputSkipped) == 27, nil
	})
	if n := testutil.ToFloat64(sequencer.MetricsOf(seq3).Outcomes.WithLabelValues("duplicate")); n != 0 {
		t.Fatalf("%v records decided again as duplicates", n)
	}
	if n := len(canontest.ReadTopic(t, e.brokers, e.names.Rejected)); n != 3 {
		t.Fatalf("%d rejected records after the reset, want the 3 of before", n)
	}
	counts := map[string]int{}
	for _, r := range canontest.ReadTopic(t, e.brokers, e.names.Versions) {
		if canontest.Header(r, schemas.HeaderSchema) != schemas.SchemaVersionV1 {
			continue
		}
		v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		counts[fmt.Sprintf("%s@%d", v.Project, v.Version)]++
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("version %s published %d times", k, n)
		}
	}
	if len(counts) != 13+11 {
		t.Fatalf("%d versions in the changelog, want 24", len(counts))
	}
}

// Records in canon.versions that no sequencer wrote (someone produced to
// the topic by hand) must not stall the partition: the restore, from an
// existing store or from nothing, skips them, counts them, and the
// sequencer goes on deciding.
func TestRestoreSkipsForeignChangelogRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEmbeddedEnv(t, 2)
	dir := filepath.Join(t.TempDir(), "store")
	sctx, scancel := context.WithCancel(ctx)
	_, st, done := startSequencer(t, sctx, e, dir)
	for i := uint64(1); i <= 3; i++ {
		e.push(t, put("acme", "roadmap", "alice", i, "t", fmt.Sprintf(`{"n":%d}`, i)))
	}
	canontest.Wait(t, ctx, "version 3", func() (bool, error) {
		h, err := st.Head("acme", "roadmap", "main")
		return h.Version == 3, err
	})
	scancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st.Close()

	// Two foreign records on roadmap's partition: a value that does not
	// decode, and a well-formed version that skips versions 4 to 6.
	key := schemas.ProjectKey("acme", "roadmap")
	part := schemas.Partition(key, e.parts)
	forged, err := schemas.EncodeVersion(&schemas.Version{Org: "acme", Project: "roadmap", Branch: "main", Version: 7, Parent: 6,
		TS: time.Now().UnixMilli(), StateHash: strings.Repeat("0", 64), LastIDs: map[string]uint64{"mallory": 1},
		Mutations: []schemas.Outcome{{ClientGroup: "g-mallory", Client: "mallory", ID: 1, Name: "item.delete", Status: schemas.StatusApplied,
			Args: json.RawMessage(`{"collection":"tasks","id":"t"}`)}}}, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	header := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}
	for _, v := range [][]byte{[]byte("not json"), forged} {
		if err := e.cl.ProduceSync(ctx, &kgo.Record{Topic: e.names.Versions, Key: key, Value: v, Partition: part, Headers: header}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The same store (restored from where it stopped, then rebuilt), and
	// a new one (restored from the start): both skip the two records.
	for i, d := range []string{dir, filepath.Join(t.TempDir(), "fresh")} {
		sctx, scancel := context.WithCancel(ctx)
		seq, st, done := startSequencer(t, sctx, e, d)
		id := uint64(4 + i)
		e.push(t, put("acme", "roadmap", "alice", id, "t", `{"after":"foreign"}`))
		canontest.Wait(t, ctx, fmt.Sprintf("version %d after the foreign records", id), func() (bool, error) {
			h, err := st.Head("acme", "roadmap", "main")
			return h.Version == id, err
		})
		if n := testutil.ToFloat64(sequencer.MetricsOf(seq).ChangelogSkipped); n != 2 {
			t.Errorf("store %d: %v records skipped, want 2", i, n)
		}
		if !seq.Serves(part) || !seq.Serves(1-part) {
			t.Errorf("store %d: the only instance does not serve both partitions", i)
		}
		scancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if seq.Serves(part) {
			t.Errorf("store %d: a stopped sequencer still serves partition %d", i, part)
		}
		st.Close()
	}
}
