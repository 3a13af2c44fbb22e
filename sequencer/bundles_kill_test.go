package sequencer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// TestBundleActivationSurvivesKill kills a `canon serve --roles
// sequencer` with SIGKILL right after each of three deploys (before, in
// or after the transaction that decides it, as it falls) and restarts it
// on the same data: every deploy is activated exactly once in
// canon.versions, every push after a deploy is decided by that deploy's
// bundle, and the restarted instance's store knows the last one.
func TestBundleActivationSurvivesKill(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx := canontest.Context(t, 3*time.Minute)
	e := newTopicsEnv(t, k.Brokers, 2)
	a := newSeqProc(t, e, "a")
	a.Start(ctx)
	canontest.Wait(t, ctx, "a owning partitions", func() (bool, error) { return a.owned() == 2, nil })

	key := schemas.ProjectKey("acme", "todo")
	part := schemas.Partition(key, e.parts)
	var ids uint64
	push := func(n int) {
		for range n {
			ids++
			m := todo("todo", "c1", ids, "todo.create", fmt.Sprintf(`{"id":"t%d","title":"x"}`, ids))
			e.produceSync(t, e.mutationRecord(t, m))
		}
	}
	var hashes []string
	for round := 1; round <= 3; round++ {
		src := todoBundle(1) + fmt.Sprintf("// round %d\n", round)
		hashes = append(hashes, schemas.BundleHash([]byte(src)))
		d := &schemas.Deploy{Org: "acme", Project: "todo", Hash: hashes[round-1], Bundle: src, DeployedAt: 1}
		v, err := schemas.EncodeDeploy(d)
		if err != nil {
			t.Fatal(err)
		}
		push(5)
		rec := e.mutationRecord(t, todo("todo", "c1", 1, "x", `{}`))
		rec.Value = v
		rec.Headers[0].Value = []byte(schemas.SchemaDeployV1)
		e.produceSync(t, rec)
		a.Kill()
		a.Start(ctx)
		push(5)
	}
	// Every push decided: ids 1..15 of c1.
	var versions []*schemas.Version
	var deploys []*schemas.Deploy
	canontest.Wait(t, ctx, "all 30 pushes decided", func() (bool, error) {
		versions, deploys = versionsAndDeploys(t, e)
		return len(versions) == 30, nil
	})
	if len(deploys) != 3 {
		t.Fatalf("%d activations in canon.versions, want 3 (one per deploy)", len(deploys))
	}
	for i, d := range deploys {
		if d.Hash != hashes[i] || d.Source == nil || d.Source.Partition != part {
			t.Fatalf("activation %d: %+v, want %s on partition %d", i, d, hashes[i], part)
		}
	}
	for _, v := range versions {
		want := ""
		for _, d := range deploys {
			if v.Source.Offset > d.Source.Offset {
				want = d.Hash
			}
		}
		if v.Bundle != want || (want != "" && v.Mutations[0].Status != schemas.StatusApplied) {
			t.Errorf("version %d (source offset %d): bundle %q status %s, want bundle %q", v.Version, v.Source.Offset, v.Bundle, v.Mutations[0].Status, want)
		}
	}
	a.Stop()
	st, err := store.Open(store.Config{Dir: a.data + "/store", Partitions: e.parts})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, ok, err := st.ActiveBundle("acme", "todo")
	if err != nil || !ok || d.Hash != hashes[2] {
		t.Errorf("the restarted instance's store: active %+v %v %v, want %s", d, ok, err, hashes[2])
	}
}

// versionsAndDeploys reads canon.versions of e.
func versionsAndDeploys(t *testing.T, e *topicsEnv) (vs []*schemas.Version, ds []*schemas.Deploy) {
	t.Helper()
	for _, r := range canontest.ReadTopic(t, e.brokers, e.names.Versions) {
		cr, err := schemas.DecodeChangelog(canontest.Header(r, schemas.HeaderSchema), canontest.Header(r, schemas.HeaderChunkHash), r.Key, r.Value, schemas.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if cr.Version != nil {
			vs = append(vs, cr.Version)
		}
		if cr.Deploy != nil {
			ds = append(ds, cr.Deploy)
		}
	}
	return vs, ds
}
