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
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const parts = 4
	e := newTopicsEnv(t, k.Brokers, parts)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 16, 40, 100_000, 11)
	g.rate = 300
	a := newSeqProc(t, e, "a")
	b := newSeqProc(t, e, "b", "--standbys", strconv.Itoa(*standbyCount))
	a.Start(ctx)
	b.Start(ctx)
	g.allowUpTo(1)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions and ready", func() (bool, error) {
		return a.owned() > 0 && b.owned() > 0 && a.Ready() && b.Ready(), nil
	})
	if *standbyCount > 0 {
		canontest.Wait(t, ctx, "b following a's partitions", func() (bool, error) {
			v, err := b.Metric("canon_sequencer_standby_partitions")
			return err == nil && v == float64(min(*standbyCount, parts-int(b.owned()))) && v > 0, nil
		})
	}
	// A history on a's partitions before the kill.
	owned := a.ownedFromLog()
	canontest.Wait(t, ctx, "a history on a's partitions", func() (bool, error) {
		return cl.records(owned) >= 3000, nil
	})
	to := killAndTakeOver(t, ctx, e, cl, a, b)
	t.Logf("standbys %d: a killed with partitions %v (%d changelog records); b restored them reading %d records; first decision after %.2fs, on all of them after %.2fs",
		*standbyCount, to.owned, to.history, to.read, to.first.Seconds(), to.all.Seconds())
	if *standbyCount >= len(to.owned) && to.read*4 > to.history {
		t.Errorf("with standbys, b's restore read %d of the %d records of a's partitions: its copies were not warm", to.read, to.history)
	}
	a.Start(ctx)
	g.finish()
	finishAndCheck(t, ctx, e, g, cl, a, b)
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
