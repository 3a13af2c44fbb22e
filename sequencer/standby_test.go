package sequencer_test

import (
	"context"
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/sequencer"
)

var standbyCount = flag.Int("standbys", 4, "TestIntegrationStandbyTakeover: --standbys of the instance that takes over (0: the baseline without)")

// TestIntegrationStandbyTakeover: b keeps warm copies of the partitions a
// owns (--standbys); a is killed with SIGKILL in a transaction under
// load, and b takes its partitions over reading only the tail its copies
// had not followed yet, not their history. It logs the time from the
// kill to the first decision on b, checks the exactly-once invariants
// (nothing lost, nothing doubled, versions contiguous), and with
// -standbys 0 gives the same figure without standbys.
func TestIntegrationStandbyTakeover(t *testing.T) {
	const parts = 4
	r := newTakeoverEnv(t, parts, 11)
	a := newSeqProc(t, r.e, "a")
	b := newSeqProc(t, r.e, "b", "--standbys", strconv.Itoa(*standbyCount))
	a.Start(r.ctx)
	b.Start(r.ctx)
	r.startLoad()
	r.waitOwningAndWatching(a, b)
	if *standbyCount > 0 {
		canontest.Wait(t, r.ctx, "b following a's partitions", func() (bool, error) {
			v, err := b.Metric("canon_sequencer_standby_partitions")
			return err == nil && v == float64(min(*standbyCount, parts-int(b.owned()))) && v > 0, nil
		})
	}
	// A history on a's partitions before the kill.
	owned := a.ownedFromLog()
	canontest.Wait(t, r.ctx, "a history on a's partitions", func() (bool, error) {
		return r.cl.records(owned) >= 3000, nil
	})
	to := r.kill(a, b)
	t.Logf("standbys %d: a killed with partitions %v (%d changelog records); b restored them reading %d records; first decision after %.2fs, on all of them after %.2fs",
		*standbyCount, to.owned, to.history, to.read, to.first.Seconds(), to.all.Seconds())
	if *standbyCount >= len(to.owned) && to.read*4 > to.history {
		t.Errorf("with standbys, b's restore read %d of the %d records of a's partitions: its copies were not warm", to.read, to.history)
	}
	r.restartAndCheck(a, b)
}

// takeoverEnv is the setup the takeover tests share: topics of a test's
// own on the shared broker, the changelog followed, and a load of 300
// mutations/s that the instances decide while one of them is killed.
type takeoverEnv struct {
	t   *testing.T
	ctx context.Context
	e   *topicsEnv
	cl  *changelog
	g   *loadGen
}

func newTakeoverEnv(t *testing.T, parts int32, seed uint64) *takeoverEnv {
	t.Helper()
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	e := newTopicsEnv(t, k.Brokers, parts)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 16, 40, 100_000, seed)
	g.rate = 300
	return &takeoverEnv{t: t, ctx: ctx, e: e, cl: cl, g: g}
}

// startLoad lets the load run to its end.
func (r *takeoverEnv) startLoad() {
	r.g.allowUpTo(1)
	startLoad(r.t, r.ctx, r.g, r.cl)
}

// waitOwningAndWatching waits until every instance owns partitions, is
// ready, and holds a liveness connection to each of the others.
func (r *takeoverEnv) waitOwningAndWatching(ps ...*seqProc) {
	r.t.Helper()
	canontest.Wait(r.t, r.ctx, "every instance owning partitions, ready and watching the others", func() (bool, error) {
		for _, p := range ps {
			n, err := p.Metric("canon_sequencer_liveness_peers")
			if p.owned() <= 0 || !p.Ready() || err != nil || int(n) != len(ps)-1 {
				return false, nil
			}
		}
		return true, nil
	})
}

// kill kills a with SIGKILL in an open transaction, waits until heirs[0]
// decides for every partition a owned, and checks that one of the heirs
// removed a from the group through its liveness connection (not its
// session timeout).
func (r *takeoverEnv) kill(a *seqProc, heirs ...*seqProc) takeover {
	r.t.Helper()
	removals := func() float64 {
		sum := 0.0
		for _, h := range heirs {
			v, err := h.Metric("canon_sequencer_liveness_removals_total")
			if err != nil {
				r.t.Fatal(err)
			}
			sum += v
		}
		return sum
	}
	before := removals()
	to := killAndTakeOver(r.t, r.ctx, r.e, r.cl, a, heirs[0])
	if n := removals() - before; n != 1 {
		r.t.Errorf("the survivors removed %v dead instances through liveness, want 1 (%s)", n, a.Name())
	}
	return to
}

// restartAndCheck restarts the killed a, lets the load finish and checks
// the exactly-once invariants on every instance.
func (r *takeoverEnv) restartAndCheck(a *seqProc, others ...*seqProc) {
	r.t.Helper()
	a.Start(r.ctx)
	r.g.finish()
	finishAndCheck(r.t, r.ctx, r.e, r.g, r.cl, append([]*seqProc{a}, others...)...)
}

// takeover is what one takeover after a SIGKILL measured.
type takeover struct {
	// owned are the partitions a owned when it was killed, with history
	// changelog records.
	owned   []int32
	history int
	// read is how many changelog records b's restores read.
	read int
	// first and all are the times from the kill to b's first decision on
	// one of them and on every one of them.
	first, all time.Duration
	// at is when a was killed.
	at time.Time
}

// killAndTakeOver kills a with SIGKILL in an open transaction and waits
// until b decides for every partition a owned.
func killAndTakeOver(t *testing.T, ctx context.Context, e *topicsEnv, cl *changelog, a, b *seqProc) takeover {
	t.Helper()
	before, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	txnID := e.prefix + sequencer.DefaultGroup + "-" + a.instanceID(ctx)
	at, owned := killInTransaction(t, ctx, kadm.NewClient(e.cl), a, txnID)
	to := takeover{owned: owned, history: cl.records(owned), at: at}
	to.first, to.all = cl.firstDecisions(ctx, owned, at)
	after, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	to.read = int(after - before)
	return to
}

// stopAndTakeOver stops a with SIGTERM and waits until b decides for
// every partition a owned; a's own last commits after the signal are not
// counted as b's decisions.
func stopAndTakeOver(t *testing.T, ctx context.Context, e *topicsEnv, cl *changelog, a, b *seqProc) takeover {
	t.Helper()
	before, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	txnID := e.prefix + sequencer.DefaultGroup + "-" + a.instanceID(ctx)
	d, err := kadm.NewClient(e.cl).DescribeTransactions(ctx, txnID)
	if err != nil || d[txnID].Err != nil {
		t.Fatalf("describe transaction %s: %v %v", txnID, err, d[txnID].Err)
	}
	owned := a.ownedFromLog()
	to := takeover{owned: owned, history: cl.records(owned), at: time.Now()}
	a.Stop()
	to.first, to.all = cl.firstDecisionsNotBy(ctx, owned, to.at, d[txnID].ProducerID)
	after, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	to.read = int(after - before)
	return to
}

// records counts the changelog's data records of partitions ps.
func (c *changelog) records(ps []int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range ps {
		n += len(c.recs[p])
	}
	return n
}
