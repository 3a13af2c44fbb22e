package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is Canon's write path on the real broker (canontest's stack) and
// the pipelines' configuration for it.
type env struct {
	*canontest.Stack
	cfg   Config
	store *store.Store
	adm   *kadm.Client
}

const testPartitions = 2

func newEnv(t testing.TB, reg *model.Registry) *env {
	t.Helper()
	if reg == nil {
		reg = model.NewRegistry()
	}
	bundles := model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
		b, err := bundle.Compile(src, bundle.Options{})
		if err != nil {
			return nil, err
		}
		return b, nil
	})
	s := canontest.Start(t, canontest.Options{Partitions: testPartitions, Registry: reg, Bundles: bundles})
	return &env{
		Stack: s,
		cfg:   Config{Kafka: s.Kafka, Topics: s.Topics, Registry: reg, Bundles: bundles},
		store: s.Store,
		adm:   kadm.NewClient(s.Client),
	}
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
	out := make([]*schemas.Mutation, len(ms))
	for i, m := range ms {
		branch := m.branch
		if branch == "" {
			branch = "main"
		}
		out[i] = &schemas.Mutation{Org: p.Org, Project: p.Project, Branch: branch,
			ClientGroup: "g-" + m.client, Client: m.client, ID: m.id, Name: m.name, Args: json.RawMessage(m.args)}
	}
	e.Produce(t, ctx, out...)
}

// waitHead waits until the sequencer's store holds version v of a branch.
func (e *env) waitHead(t testing.TB, ctx context.Context, b BranchRef, v uint64) {
	t.Helper()
	e.WaitHead(t, ctx, b.Org, b.Project, b.Branch, v)
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

func testCtx(t testing.TB) context.Context { return canontest.Context(t, 3*time.Minute) }
