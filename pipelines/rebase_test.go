package pipelines

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// rebaseHistory is the scenario of the rebase tests: main and a feature
// branch made from main@4 that then diverge.
//
//	main v1-v4   a#1-4  name Roadmap; t1 {title one}, t2 {title two}, t3 {title three}
//	feature v1   f#1    branch.create from main@4
//	feature v2   b#1    patch t1 title "one (b)"
//	feature v3   b#2    delete t2
//	feature v4   b#3    patch t3 done
//	feature v5   b#4    put t4
//	feature v6   b#5    splice t1 /title: "one" -> "ONE"
//	feature v7   b#6    patch t5: error, t5 does not exist on feature
//	main v5      a#5    patch t1 title "uno", owner ann (conflicting edit)
//	main v6      a#6    delete t3 (b#3 becomes an error)
//	main v7      a#7    put t2 again
//	main v8      a#8    put t5 (b#6 becomes applied)
func rebaseHistory() []mut {
	return []mut{
		{"", "a", 1, "project.set", `{"name":"Roadmap"}`},
		{"", "a", 2, "item.put", `{"collection":"tasks","id":"t1","data":{"title":"one"}}`},
		{"", "a", 3, "item.put", `{"collection":"tasks","id":"t2","data":{"title":"two"}}`},
		{"", "a", 4, "item.put", `{"collection":"tasks","id":"t3","data":{"title":"three"}}`},
		{"feature", "f", 1, "branch.create", `{"from":"main","version":4}`},
		{"feature", "b", 1, "item.patch", `{"collection":"tasks","id":"t1","data":{"title":"one (b)"}}`},
		{"feature", "b", 2, "item.delete", `{"collection":"tasks","id":"t2"}`},
		{"feature", "b", 3, "item.patch", `{"collection":"tasks","id":"t3","data":{"done":true}}`},
		{"feature", "b", 4, "item.put", `{"collection":"tasks","id":"t4","data":{"title":"four"}}`},
		{"feature", "b", 5, "item.splice", `{"collection":"tasks","id":"t1","path":"/title","index":0,"delete":3,"insert":"ONE"}`},
		{"feature", "b", 6, "item.patch", `{"collection":"tasks","id":"t5","data":{"x":1}}`},
		{"", "a", 5, "item.patch", `{"collection":"tasks","id":"t1","data":{"title":"uno","owner":"ann"}}`},
		{"", "a", 6, "item.delete", `{"collection":"tasks","id":"t3"}`},
		{"", "a", 7, "item.put", `{"collection":"tasks","id":"t2","data":{"title":"two, edited on main"}}`},
		{"", "a", 8, "item.put", `{"collection":"tasks","id":"t5","data":{"title":"five"}}`},
	}
}

// The expected outcome of rebasing feature 2..7 onto main@8.
var (
	wantConflicts = []struct {
		version     uint64
		client      string
		id          uint64
		from, to    string
		errContains string
	}{
		{4, "b", 3, "applied", "error", "does not exist"},
		{7, "b", 6, "error", "applied", ""},
	}
	wantDiff = []struct{ collection, id, change string }{
		{"tasks", "t1", "differs"},        // title ONE (b) on both, owner ann only on the target
		{"tasks", "t3", "only in source"}, // deleted on main, patched on feature
		{"tasks", "t5", "only in target"}, // created on main, patched by b#6 after the rebase
	}
)

func checkRebase(t *testing.T, what string, res *RebaseResult) {
	t.Helper()
	if len(res.Conflicts) != len(wantConflicts) {
		t.Fatalf("%s: conflicts %+v, want %d", what, res.Conflicts, len(wantConflicts))
	}
	for i, w := range wantConflicts {
		c := res.Conflicts[i]
		if c.Version != w.version || c.Mutation.Client != w.client || c.Mutation.ID != w.id || c.Status != w.from || c.NewStatus != w.to ||
			!strings.Contains(c.NewError, w.errContains) {
			t.Errorf("%s: conflict %d = %+v, want %+v", what, i, c, w)
		}
	}
	if len(res.Diff.Scalars) != 0 {
		t.Errorf("%s: scalars differ: %+v", what, res.Diff.Scalars)
	}
	if len(res.Diff.Items) != len(wantDiff) {
		t.Fatalf("%s: diff %+v, want %d items", what, res.Diff.Items, len(wantDiff))
	}
	for i, w := range wantDiff {
		d := res.Diff.Items[i]
		if d.Collection != w.collection || d.ID != w.id || d.Change != w.change {
			t.Errorf("%s: diff item %d = %+v, want %+v", what, i, d, w)
		}
	}
	if d := res.Diff.Items[0]; string(d.TargetMeta) != "{}" || d.SourceHash == d.TargetHash {
		t.Errorf("%s: t1 diff %+v", what, d)
	}
}

func TestRebaseScenarios(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t, nil)
	p := ProjectRef{"acme", "roadmap"}
	pushed := time.Now()
	e.push(t, ctx, p, rebaseHistory()...)
	// A duplicate and a gap: records that make no version.
	e.push(t, ctx, p, mut{"feature", "b", 1, "item.put", `{"collection":"tasks","id":"dup","data":1}`},
		mut{"feature", "b", 9, "item.put", `{"collection":"tasks","id":"gap","data":1}`})
	e.waitHead(t, ctx, BranchRef{p, "main"}, 8)
	e.waitHead(t, ctx, BranchRef{p, "feature"}, 7)
	feature := BranchRef{p, "feature"}

	// The raw log since the push replays feature 2..7 (its version 1 is
	// its branch.create) onto a branch made from feature@1.
	raw, err := Replay(ctx, e.cfg, ReplayOptions{Source: feature, Raw: &RawRange{FromOffset: -1, ToOffset: -1, Since: pushed.Add(-time.Second)}, InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if !raw.Deterministic || raw.From != 2 || raw.To != 7 || raw.Checked != 6 || raw.Skipped != 2 {
		t.Errorf("raw replay of feature: %+v", raw)
	}
	opt := RebaseOptions{Source: feature, From: 2, Onto: &BranchAt{"main", 8}, Into: "feature-rebased"}

	// A dry run decides in memory and writes nothing.
	before := e.mutationsEnd(t, ctx)
	dry := opt
	dry.DryRun = true
	dres, err := Rebase(ctx, e.cfg, dry)
	if err != nil {
		t.Fatal(err)
	}
	checkRebase(t, "dry run", dres)
	if after := e.mutationsEnd(t, ctx); after != before {
		t.Fatalf("the dry run wrote %d records to %s", after-before, e.cfg.Topics.Mutations)
	}
	want := Counts{Mutations: 7, Versions: 7, Applied: 6, Errors: 1}
	if dres.Counts != want {
		t.Errorf("dry run counts %+v, want %+v", dres.Counts, want)
	}

	cfg := e.cfg
	cfg.Principal = "user:ann"
	started := time.Now()
	res, err := Rebase(ctx, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkRebase(t, "rebase", res)
	if res.Counts != want || res.TargetHead != 7 {
		t.Errorf("rebase counts %+v head %d, want %+v head 7", res.Counts, res.TargetHead, want)
	}
	if res.TargetStateHash != dres.TargetStateHash {
		t.Errorf("rebase made state %s, the dry run predicted %s", res.TargetStateHash, dres.TargetStateHash)
	}
	target := BranchRef{p, "feature-rebased"}
	e.waitHead(t, ctx, target, 7)
	if st, err := e.store.Latest(p.Org, p.Project, target.Branch); err != nil || st.StateHash != res.TargetStateHash {
		t.Fatalf("sequencer's store: %s %v, rebase reported %s", st.StateHash, err, res.TargetStateHash)
	}

	checkLineage(t, ctx, e.cfg, target, feature, started)

	// Run again: nothing new, the same summary.
	again, err := Rebase(ctx, e.cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkRebase(t, "rerun", again)
	if again.AlreadyOnTarget != 7 || again.TargetHead != 7 {
		t.Errorf("rerun: %d already on the target, head %d; want 7 and 7", again.AlreadyOnTarget, again.TargetHead)
	}
	// A different base for an existing target is refused.
	other := opt
	other.Onto = &BranchAt{"main", 7}
	if _, err := Rebase(ctx, e.cfg, other); err == nil || !strings.Contains(err.Error(), "was not made from main@7") {
		t.Errorf("rebase onto another base into an existing target: %v", err)
	}

	// Export main@8, rebase onto the snapshot: the same outcomes and state.
	var buf bytes.Buffer
	exp, err := Export(ctx, e.cfg, ExportOptions{Project: p, Branch: "main"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Versions != 8+7+7 || exp.Items != 3 || exp.Snapshot != "main@8" {
		t.Errorf("export: %+v", exp)
	}
	snap, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	sres, err := Rebase(ctx, e.cfg, RebaseOptions{Source: feature, From: 2, OntoSnapshot: snap, OntoName: "main.ndjson", Into: "feature-snap"})
	if err != nil {
		t.Fatal(err)
	}
	checkRebase(t, "onto snapshot", sres)
	if sres.TargetStateHash != res.TargetStateHash {
		t.Errorf("onto the snapshot of main@8: state %s, onto main@8: %s", sres.TargetStateHash, res.TargetStateHash)
	}
	// create + t1, t2, t5 put and t3 delete (feature@1 is main@4) + 6.
	if sres.Mutations != 1+4+6 {
		t.Errorf("onto snapshot: %d mutations, want 11", sres.Mutations)
	}

	// Import the snapshot as a new project and as a branch.
	for _, imp := range []ImportOptions{
		{Snapshot: snap, Target: BranchRef{ProjectRef{"acme", "imported"}, "main"}},
		{Snapshot: snap, Target: BranchRef{p, "from-snapshot"}, From: &BranchAt{Branch: "feature"}},
	} {
		ir, err := Import(ctx, e.cfg, imp)
		if err != nil {
			t.Fatal(err)
		}
		if !ir.Matches || ir.SnapshotStateHash != snap.StateHash {
			t.Errorf("import into %s: %+v; snapshot %s", imp.Target, ir, snap.StateHash)
		}
		again, err := Import(ctx, e.cfg, imp)
		if err != nil {
			t.Fatal(err)
		}
		if again.AlreadyOnTarget != again.Mutations || !reflect.DeepEqual(again.TargetStateHash, ir.TargetStateHash) {
			t.Errorf("import rerun into %s: %+v", imp.Target, again)
		}
	}
}

// checkLineage reads the target's versions from the changelog: every
// mutation records the rebase job (who ran it, when), and each re-sent one
// the mutation of src it re-sends; the job's branch.create has no origin.
func checkLineage(t *testing.T, ctx context.Context, cfg Config, target, src BranchRef, started time.Time) {
	t.Helper()
	h, err := readHistory(ctx, cfg.withDefaults(), false, target.ProjectRef)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for v := uint64(1); v <= 7; v++ {
		ver := h.version(target, v)
		if ver == nil {
			t.Fatalf("%s has no version %d in the changelog", target, v)
		}
		o := ver.Mutations[0]
		if o.Job == nil || o.Job.Kind != JobRebase || o.Job.Principal != "user:ann" || o.Job.At < started.UnixMilli() {
			t.Errorf("%s@%d: job %+v, want rebase by user:ann at or after %d", target, v, o.Job, started.UnixMilli())
		}
		if o.Principal != "" {
			t.Errorf("%s@%d: principal %q on a re-sent mutation", target, v, o.Principal)
		}
		if v == 1 {
			if o.Origin != nil {
				t.Errorf("%s@1 (the job's branch.create): origin %+v", target, o.Origin)
			}
			continue
		}
		srcVer := h.version(src, v)
		so := srcVer.Mutations[0]
		want := schemas.Origin{Branch: src.Branch, Version: v, Client: so.Client, ID: so.ID}
		if o.Origin == nil || *o.Origin != want {
			t.Errorf("%s@%d: origin %+v, want %+v", target, v, o.Origin, want)
		}
	}
}
