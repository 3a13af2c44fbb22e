package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/kafka/kafkatest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is Canon's write path on the real broker: topics of the test's own
// and a sequencer in this process with its store and registry.
type env struct {
	cfg   Config
	store *store.Store
	prod  *kgo.Client
	adm   *kadm.Client
}

const testPartitions = 2

func newEnv(t testing.TB, reg *model.Registry) *env {
	t.Helper()
	brokers, info := kafkatest.Topics(t, testPartitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if reg == nil {
		reg = model.NewRegistry()
	}
	e := &env{
		cfg:  Config{Kafka: kafka.ClientConfig{Brokers: brokers}, Topics: info.Names, Registry: reg},
		prod: cl,
		adm:  kadm.NewClient(cl),
	}
	if e.store, err = store.Open(store.Config{Dir: t.TempDir(), Partitions: testPartitions}); err != nil {
		t.Fatal(err)
	}
	seq, err := sequencer.New(sequencer.Config{Kafka: e.cfg.Kafka, Topics: info.Names, Store: e.store,
		Group: info.Names.Mutations + ".seq", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- seq.Run(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && sctx.Err() == nil {
			t.Errorf("sequencer: %v", err)
		}
		e.store.Close()
	})
	return e
}

// mut is a mutation of a test's history.
type mut struct {
	branch, client string
	id             uint64
	name           string
	args           string
}

// push writes mutations to canon.mutations as the ingest does, in order.
func (e *env) push(t testing.TB, ctx context.Context, p ProjectRef, ms ...mut) {
	t.Helper()
	recs := make([]*kgo.Record, len(ms))
	for i, m := range ms {
		branch := m.branch
		if branch == "" {
			branch = "main"
		}
		val, err := schemas.EncodeMutation(&schemas.Mutation{Org: p.Org, Project: p.Project, Branch: branch,
			ClientGroup: "g-" + m.client, Client: m.client, ID: m.id, Name: m.name, Args: json.RawMessage(m.args)}, schemas.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: e.cfg.Topics.Mutations, Key: schemas.ProjectKey(p.Org, p.Project), Value: val,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}}
	}
	if err := e.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitHead waits until the sequencer's store holds version v of a branch.
func (e *env) waitHead(t testing.TB, ctx context.Context, b BranchRef, v uint64) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		h, err := e.store.Head(b.Org, b.Project, b.Branch)
		if err != nil {
			t.Fatal(err)
		}
		if h.Version >= v {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: head %d, waited for %d: %v", b, h.Version, v, ctx.Err())
		case <-tick.C:
		}
	}
}

// mutationsEnd is the sum of canon.mutations' end offsets.
func (e *env) mutationsEnd(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	l, err := e.adm.ListEndOffsets(ctx, e.cfg.Topics.Mutations)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	l.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// onTarget checks that a branch of the sequencer's store holds each
// (client, id) at most once and returns how many mutations it holds.
func (e *env) onTarget(t *testing.T, b BranchRef) int {
	t.Helper()
	seen := map[string]uint64{}
	n := 0
	for from := uint64(1); ; {
		vs, err := e.store.Versions(b.Org, b.Project, b.Branch, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			for _, o := range v.Mutations {
				k := fmt.Sprintf("%s#%d", o.Client, o.ID)
				if prev, ok := seen[k]; ok {
					t.Errorf("%s: mutation %s in versions %d and %d", b, k, prev, v.Version)
				}
				seen[k] = v.Version
				n++
			}
		}
		if len(vs) < 1000 {
			return n
		}
		from += 1000
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
