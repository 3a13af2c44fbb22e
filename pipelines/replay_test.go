package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/canon-sync/canon/model"
)

// bigHistory is n mutations of four clients on main over 200 items:
// puts, patches, splices, deletes and scalar sets, some of which fail
// (patching a deleted item), from a fixed seed.
func bigHistory(n int) []mut {
	rng := rand.New(rand.NewPCG(8, 10000))
	ids := map[string]uint64{}
	ms := make([]mut, n)
	for i := range ms {
		c := fmt.Sprintf("c%d", rng.IntN(4))
		ids[c]++
		item := fmt.Sprintf("i%03d", rng.IntN(200))
		var name, args string
		switch k := rng.IntN(10); {
		case i%1000 == 999:
			// Args over 4 KiB are stored as chunks (argsRef): a replay
			// reads them back from there.
			name, args = "item.put", fmt.Sprintf(`{"collection":"items","id":%q,"data":{"n":%d,"text":%q}}`, item, i, strings.Repeat(fmt.Sprintf("large %d ", i), 1000))
		case i < 50 || k < 3:
			name, args = "item.put", fmt.Sprintf(`{"collection":"items","id":%q,"meta":{"k":%d},"data":{"n":%d,"text":"item %s"}}`, item, k, i, item)
		case k < 6:
			name, args = "item.patch", fmt.Sprintf(`{"collection":"items","id":%q,"data":{"n":%d,"by":%q}}`, item, i, c)
		case k < 8:
			name, args = "item.splice", fmt.Sprintf(`{"collection":"items","id":%q,"path":"/text","index":0,"delete":1,"insert":"I%d"}`, item, i%10)
		case k < 9:
			name, args = "item.delete", fmt.Sprintf(`{"collection":"items","id":%q}`, item)
		default:
			name, args = "project.set", fmt.Sprintf(`{"counter":%d}`, i)
		}
		ms[i] = mut{"", c, ids[c], name, args}
	}
	return ms
}

func TestReplayDeterminism10000(t *testing.T) {
	const n = 10000
	ctx := testCtx(t)
	e := newEnv(t, nil)
	p := ProjectRef{"acme", "big"}
	main := BranchRef{p, "main"}
	e.push(t, ctx, p, bigHistory(n)...)
	e.waitHead(t, ctx, main, n)

	// In memory, from the empty state.
	res, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, Into: "acme/big-check", InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Deterministic || res.Checked != n || res.From != 1 || res.To != n || res.Versions != n {
		t.Fatalf("in memory: %+v, divergence %+v", res, res.Divergence)
	}
	if res.Errors == 0 || res.Applied == 0 {
		t.Fatalf("the history should hold applied and error outcomes: %+v", res.Counts)
	}
	t.Logf("in memory: %d versions checked in %d ms (%d applied, %d errors)", res.Checked, res.ElapsedMS, res.Applied, res.Errors)

	// Through Kafka and the sequencer, into a new project.
	kres, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, Into: "acme/big-replay"})
	if err != nil {
		t.Fatal(err)
	}
	if !kres.Deterministic || kres.Checked != n || kres.Versions != n {
		t.Fatalf("through the sequencer: %+v, divergence %+v", kres, kres.Divergence)
	}
	t.Logf("through the sequencer: %d versions checked in %d ms", kres.Checked, kres.ElapsedMS)
	got, err := e.store.Latest("acme", "big-replay", "main")
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.store.Latest(p.Org, p.Project, "main")
	if err != nil {
		t.Fatal(err)
	}
	if got.StateHash != want.StateHash || got.Version != n {
		t.Fatalf("replayed project at %d %s, source at %d %s", got.Version, got.StateHash, want.Version, want.StateHash)
	}

	// From the raw log: the records at offsets [3000, 6000) of the
	// project's partition, onto a branch made from the version before.
	rres, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, Raw: &RawRange{FromOffset: 3000, ToOffset: 6000}, Into: "raw", InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rres.Deterministic || rres.Checked != 3000 || rres.From != 3001 || rres.To != 6000 || rres.Skipped != 0 {
		t.Fatalf("raw: %+v, divergence %+v", rres, rres.Divergence)
	}
}

// A mutator that counts its calls decides differently on a replay: the
// replay reports the first version it made.
func TestReplayCatchesNondeterministicMutator(t *testing.T) {
	var calls atomic.Int64
	reg := model.NewRegistry()
	if err := reg.Register("note.stamp", func(tx model.Tx, _ json.RawMessage) error {
		n := calls.Add(1)
		return tx.Put("notes", "stamp", model.Item{Data: json.RawMessage(fmt.Sprintf(`{"calls":%d}`, n))})
	}); err != nil {
		t.Fatal(err)
	}
	// note.now writes tx.Now(): deterministic as long as a replay keeps
	// the records' timestamps.
	if err := reg.Register("note.now", func(tx model.Tx, _ json.RawMessage) error {
		return tx.Put("notes", "now", model.Item{Data: json.RawMessage(fmt.Sprintf(`{"at":%d}`, tx.Now().UnixMilli()))})
	}); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	e := newEnv(t, reg)
	p := ProjectRef{"acme", "stamps"}
	main := BranchRef{p, "main"}
	var ms []mut
	var a, s uint64
	for v := 1; v <= 200; v++ {
		if v == 137 || v == 150 {
			s++
			ms = append(ms, mut{"", "s", s, "note.stamp", `{}`})
			continue
		}
		if v%10 == 5 {
			a++
			ms = append(ms, mut{"", "a", a, "note.now", `{}`})
			continue
		}
		a++
		ms = append(ms, mut{"", "a", a, "item.put", fmt.Sprintf(`{"collection":"items","id":"i%d","data":{"v":%d}}`, v%17, v)})
	}
	e.push(t, ctx, p, ms...)
	e.waitHead(t, ctx, main, 200)

	check := func(what string, res *ReplayResult, targetVersion uint64) {
		t.Helper()
		d := res.Divergence
		if res.Deterministic || d == nil {
			t.Fatalf("%s: no divergence found: %+v", what, res)
		}
		if d.Version != 137 || d.TargetVersion != targetVersion || d.Mutation.Name != "note.stamp" || d.Mutation.Client != "s" || d.Mutation.ID != 1 ||
			d.Item == nil || d.Item.Collection != "notes" || d.Item.ID != "stamp" || d.StateHash == d.ReplayedStateHash {
			t.Errorf("%s: divergence %+v item %+v", what, d, d.Item)
		}
	}
	res, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	check("in memory", res, 137)
	if res.Target != "acme/canon-replay@main" {
		t.Errorf("in memory, the default target is %s", res.Target)
	}
	// Through the sequencer, from version 100: the target is made from
	// main@99, so version 137 of main is version 39 of the target.
	kres, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, From: 100, Into: "check"})
	if err != nil {
		t.Fatal(err)
	}
	check("through the sequencer", kres, 39)
	// From the raw log, through the sequencer: the project is alone in
	// its partition, so version v came from offset v-1.
	rres, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, Raw: &RawRange{FromOffset: 99, ToOffset: -1}, Into: "raw-check"})
	if err != nil {
		t.Fatal(err)
	}
	if rres.From != 100 || rres.To < 200 {
		t.Errorf("raw range: versions %d-%d, want 100-200 at least", rres.From, rres.To)
	}
	check("raw, through the sequencer", rres, 39)
	// In memory, from version 100 too; the name of the branch made
	// through the sequencer is refused.
	if _, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, From: 100, Into: "check", InMemory: true}); err == nil {
		t.Error("an in-memory replay into an existing branch: no error")
	}
	mres, err := Replay(ctx, e.cfg, ReplayOptions{Source: main, From: 100, InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	check("in memory from 100", mres, 39)
	// Up to version 136 the replay agrees.
	ok, err := Replay(context.Background(), e.cfg, ReplayOptions{Source: main, To: 136, Into: "acme/stamps-ok", InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if !ok.Deterministic || ok.Checked != 136 {
		t.Errorf("versions 1-136: %+v", ok)
	}
}
