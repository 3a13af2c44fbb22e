package sequencer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	clog "github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// todoBundle is a small application's mutators; title case is what tells
// which bundle decided a todo.create (version 2 shouts).
func todoBundle(version int) string {
	title := "args.title"
	if version == 2 {
		title = "args.title.toUpperCase()"
	}
	return `export default {
  "todo.create": (tx, args) => {
    if (tx.has("todos", args.id)) { const e = new Error("todo " + args.id + " exists"); e.code = "exists"; throw e; }
    tx.put("todos", args.id, {title: ` + title + `, done: false, at: tx.now()});
  },
  "todo.toggle": (tx, args) => {
    const it = tx.get("todos", args.id);
    if (!it) throw new Error("no todo " + args.id);
    it.data.done = !it.data.done;
    tx.put("todos", args.id, it.data);
  },
  "spin": () => { for (;;) {} },
  "hog": () => { const a = []; for (;;) a.push(new Array(1 << 16).fill(7)); },
  "clock": () => { Date.now(); },
};
`
}

// testBudgets keep a runaway mutator's test short.
var testBudgets = bundle.Options{CPUBudget: 5_000_000, MemoryBudget: 16 << 20}

func bundleCache() *model.BundleCache {
	return model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
		b, err := bundle.Compile(src, testBudgets)
		if err != nil {
			return nil, err
		}
		return b, nil
	})
}

// deployRecord is the deploy/v1 record the producer writes for a project.
func deployRecord(t *testing.T, s *canontest.Stack, org, project, src string) *kgo.Record {
	t.Helper()
	d := &schemas.Deploy{Org: org, Project: project, Hash: schemas.BundleHash([]byte(src)), Bundle: src, DeployedAt: time.Now().UnixMilli()}
	v, err := schemas.EncodeDeploy(d)
	if err != nil {
		t.Fatal(err)
	}
	key := schemas.DeployKey(org, project)
	return &kgo.Record{Topic: s.Topics.Mutations, Key: key, Value: v, Partition: schemas.Partition(key, s.Partitions),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}}
}

func todo(project, client string, id uint64, name, args string) *schemas.Mutation {
	return &schemas.Mutation{Org: "acme", Project: project, Branch: "main", ClientGroup: "g-" + client, Client: client,
		ID: id, Name: name, Args: json.RawMessage(args)}
}

// changelogOf reads canon.versions: the versions in order and the
// activations, per project.
func changelogOf(t *testing.T, s *canontest.Stack) (versions []*schemas.Version, deploys []*schemas.Deploy) {
	t.Helper()
	for _, r := range canontest.ReadTopic(t, s.Brokers, s.Topics.Versions) {
		cr, err := schemas.DecodeChangelog(canontest.Header(r, schemas.HeaderSchema), canontest.Header(r, schemas.HeaderChunkHash), r.Key, r.Value, schemas.Limits{})
		if err != nil {
			t.Fatalf("changelog record at %d: %v", r.Offset, err)
		}
		if cr.Version != nil {
			versions = append(versions, cr.Version)
		}
		if cr.Deploy != nil {
			deploys = append(deploys, cr.Deploy)
		}
	}
	return versions, deploys
}

// TestBundleDeployDecideAndBudgets deploys a bundle through the sequencer
// on the real broker: its mutators apply and their versions name it, the
// built-ins stay, a runaway loop, a memory hog and a wall clock read are
// errors and the partition goes on, a bundle that does not compile is a
// rejected record, the active bundle again is a no-op, and a store
// rebuilt from the changelog alone knows the active bundle.
func TestBundleDeployDecideAndBudgets(t *testing.T) {
	ctx := canontest.Context(t, 2*time.Minute)
	s := canontest.Start(t, canontest.Options{Bundles: bundleCache()})
	v1 := todoBundle(1)
	h1 := schemas.BundleHash([]byte(v1))

	s.Produce(t, ctx, todo("todo", "c1", 1, "item.put", `{"collection":"notes","id":"n","data":{"x":1}}`))
	if err := s.Client.ProduceSync(ctx, deployRecord(t, s, "acme", "todo", v1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	bad := deployRecord(t, s, "acme", "todo", `export default { "x": (tx) => { `) // a syntax error
	again := deployRecord(t, s, "acme", "todo", v1)                               // the active bundle again
	if err := s.Client.ProduceSync(ctx, bad, again).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s.Produce(t, ctx,
		todo("todo", "c1", 2, "todo.create", `{"id":"t1","title":"milk"}`),
		todo("todo", "c1", 3, "todo.toggle", `{"id":"t1"}`),
		todo("todo", "c1", 4, "spin", `{}`),
		todo("todo", "c1", 5, "hog", `{}`),
		todo("todo", "c1", 6, "clock", `{}`),
		todo("todo", "c1", 7, "todo.create", `{"id":"t1","title":"again"}`),
		todo("todo", "c1", 8, "no.such", `{}`),
		todo("todo", "c1", 9, "item.put", `{"collection":"notes","id":"n","data":{"x":2}}`),
		todo("todo", "c1", 10, "todo.create", `{"id":"t2","title":"eggs"}`),
		todo("other", "c1", 1, "todo.create", `{"id":"t1","title":"x"}`), // another project: no bundle
	)
	s.WaitHead(t, ctx, "acme", "todo", "main", 10)
	s.WaitHead(t, ctx, "acme", "other", "main", 1)

	vs, err := s.Store.Versions("acme", "todo", "main", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, status, code, bundle string }{
		{"item.put", "applied", "", ""},
		{"todo.create", "applied", "", h1},
		{"todo.toggle", "applied", "", h1},
		{"spin", "error", bundle.CodeBudgetExceeded, h1},
		{"hog", "error", bundle.CodeBudgetExceeded, h1},
		{"clock", "error", "mutator_error", h1},
		{"todo.create", "error", "exists", h1},
		{"no.such", "error", model.CodeUnknownMutator, ""},
		{"item.put", "applied", "", ""},
		{"todo.create", "applied", "", h1},
	}
	for i, w := range want {
		v := vs[i]
		o := v.Mutations[0]
		if o.Name != w.name || o.Status != w.status || o.Code != w.code || v.Bundle != w.bundle {
			t.Errorf("version %d: %s %s code %q bundle %q (%s), want %s %s code %q bundle %q",
				v.Version, o.Name, o.Status, o.Code, v.Bundle, o.Error, w.name, w.status, w.code, w.bundle)
		}
	}
	if e := vs[3].Mutations[0].Error; !strings.Contains(e, "CPU") && !strings.Contains(e, "cpu") {
		t.Errorf("the loop's error %q does not name the CPU budget", e)
	}
	if e := vs[5].Mutations[0].Error; !strings.Contains(e, "tx.now()") {
		t.Errorf("Date.now()'s error %q does not name tx.now()", e)
	}
	_, body, found, err := s.Store.Item("acme", "todo", "main", "todos", "t1", 0)
	if err != nil || !found || !strings.Contains(string(body), `"done":true`) || !strings.Contains(string(body), `"title":"milk"`) {
		t.Errorf("todo t1 = %s (found %v, %v), want milk, done", body, found, err)
	}
	other, err := s.Store.Versions("acme", "other", "main", 1, 10)
	if err != nil || other[0].Mutations[0].Code != model.CodeUnknownMutator {
		t.Errorf("a project without a deploy ran todo.create: %+v %v", other[0].Mutations[0], err)
	}

	// The bad bundle is a rejected record saying why; the second deploy
	// of the active bundle wrote nothing.
	var rejected []*schemas.Rejected
	canontest.Wait(t, ctx, "the bad deploy's rejection", func() (bool, error) {
		rejected = rejected[:0]
		for _, r := range canontest.ReadTopic(t, s.Brokers, s.Topics.Rejected) {
			rej, err := schemas.DecodeRejected(canontest.Header(r, schemas.HeaderSchema), r.Value, schemas.Limits{})
			if err != nil {
				return false, err
			}
			rejected = append(rejected, rej)
		}
		return len(rejected) > 0, nil
	})
	if len(rejected) != 1 || rejected[0].Reason != schemas.ReasonBadBundle || !strings.Contains(rejected[0].Message, "does not compile") {
		t.Errorf("rejections: %+v, want one bad_bundle", rejected)
	}
	_, deploys := changelogOf(t, s)
	if len(deploys) != 1 || deploys[0].Hash != h1 || deploys[0].Source == nil {
		t.Errorf("activations in the changelog: %+v, want one of %s", deploys, h1)
	}

	// A store rebuilt from the changelog alone (a restore, a read
	// replica) knows the active bundle and its source.
	fresh, err := store.Open(store.Config{Dir: t.TempDir(), Partitions: s.Partitions})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	m, err := clog.NewMaterializer(clog.MaterializerConfig{
		Tail: clog.Config{Kafka: s.Kafka, Topics: s.Topics, PartitionCount: s.Partitions}, Sink: fresh, Until: clog.LastStable})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close()
	d, ok, err := fresh.ActiveBundle("acme", "todo")
	if err != nil || !ok || d.Hash != h1 {
		t.Fatalf("rebuilt store's active bundle of acme/todo = %+v %v %v, want %s", d, ok, err, h1)
	}
	src, ok, err := fresh.Bundle(fresh.PartitionOf("acme", "todo"), "acme", h1)
	if err != nil || !ok || string(src) != v1 {
		t.Errorf("rebuilt store's bundle source: %d bytes, %v, %v", len(src), ok, err)
	}
	if _, ok, _ := fresh.ActiveBundle("acme", "other"); ok {
		t.Errorf("acme/other has an active bundle in the rebuilt store")
	}
}

// TestBundleDeployRacingPushes deploys two bundles while clients push:
// every version's mutation is decided by the one bundle its record names,
// and that is the bundle active at its position in the partition (the
// last activation before it in canon.versions), never half of each.
func TestBundleDeployRacingPushes(t *testing.T) {
	ctx := canontest.Context(t, 3*time.Minute)
	s := canontest.Start(t, canontest.Options{Bundles: bundleCache(), Partitions: 1})
	v1, v2 := todoBundle(1), todoBundle(2)
	h1, h2 := schemas.BundleHash([]byte(v1)), schemas.BundleHash([]byte(v2))
	if err := s.Client.ProduceSync(ctx, deployRecord(t, s, "acme", "race", v1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Clients push until well after the second deploy, which lands in the
	// middle of their pushes.
	const clients = 4
	stop := make(chan struct{})
	pushed := make([]uint64, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("c%d", c)
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s.Produce(t, ctx, todo("race", client, i, "todo.create", fmt.Sprintf(`{"id":"%s-%d","title":"t"}`, client, i)))
				pushed[c] = i
			}
		}()
	}
	head := func() uint64 {
		h, err := s.Store.Head("acme", "race", "main")
		if err != nil {
			t.Error(err)
		}
		return h.Version
	}
	canontest.Wait(t, ctx, "some versions", func() (bool, error) { return head() >= 30, nil })
	if err := s.Client.ProduceSync(ctx, deployRecord(t, s, "acme", "race", v2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	at := head()
	canontest.Wait(t, ctx, "more versions", func() (bool, error) { return head() >= at+100, nil })
	close(stop)
	wg.Wait()
	var total uint64
	for _, n := range pushed {
		total += n
	}
	s.WaitHead(t, ctx, "acme", "race", "main", total)

	versions, deploys := changelogOf(t, s)
	if len(deploys) != 2 || deploys[0].Hash != h1 || deploys[1].Hash != h2 {
		t.Fatalf("activations: %d, want %s then %s", len(deploys), h1, h2)
	}
	at2 := deploys[1].Source.Offset
	var before, after int
	for _, v := range versions {
		if v.Project != "race" {
			continue
		}
		want := h1
		if v.Source.Offset > at2 {
			want, after = h2, after+1
		} else {
			before++
		}
		if v.Bundle != want {
			t.Fatalf("version %d (source offset %d, second deploy at %d) names bundle %s, want %s", v.Version, v.Source.Offset, at2, v.Bundle, want)
		}
		body, err := s.Store.Body("acme", "race", v.Items[0].Hash)
		if err != nil {
			t.Fatal(err)
		}
		shouts := strings.Contains(string(body), `"title":"T"`)
		if shouts != (v.Bundle == h2) {
			t.Fatalf("version %d names bundle %s but its todo is %s: decided by the other bundle", v.Version, v.Bundle, body)
		}
	}
	if before == 0 || after == 0 {
		t.Errorf("the deploy did not race the pushes: %d versions before it, %d after", before, after)
	}
	t.Logf("%d versions under the first bundle, %d under the second", before, after)
}
