package pipelines

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
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
