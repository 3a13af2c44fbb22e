package sequencer_test

// The recovery test: how long the partitions of a sequencer killed with a
// transaction open wait for their next decision, when the same instance
// restarts and when another instance takes over. It asserts the
// exactly-once invariants, and logs the times (a benchmark's job is to
// judge them: no threshold here).

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
)

var recoveryKills = flag.Int("kills", 2, "TestIntegrationKillRecovery: kills of each kind (restart, takeover)")

var instanceLine = regexp.MustCompile(`component=sequencer instance=(\S+)`)

// instanceID is the instance id the process logs.
func (p *seqProc) instanceID(ctx context.Context) string {
	p.t.Helper()
	var id string
	canontest.Wait(p.t, ctx, p.Name()+" logging its instance id", func() (bool, error) {
		m := instanceLine.FindStringSubmatch(p.CurrentLog())
		if m != nil {
			id = m[1]
		}
		return m != nil, nil
	})
	return id
}

// killInTransaction stops p until the broker shows its transaction open,
// then kills it, and returns when: the transaction was open at that
// moment, and the instance's partitions.
func killInTransaction(t *testing.T, ctx context.Context, adm *kadm.Client, p *seqProc, txnID string) (time.Time, []int32) {
	t.Helper()
	var at time.Time
	var owned []int32
	canontest.Wait(t, ctx, p.Name()+" stopped with a transaction open", func() (bool, error) {
		p.Signal(syscall.SIGSTOP)
		d, err := adm.DescribeTransactions(ctx, txnID)
		if err != nil {
			return false, fmt.Errorf("describe transaction %s: %w", txnID, err)
		}
		if tx, ok := d[txnID]; ok && tx.Err == nil && tx.State == "Ongoing" {
			owned = p.ownedFromLog()
			at = time.Now()
			p.Kill()
			return true, nil
		}
		p.Signal(syscall.SIGCONT)
		return false, nil
	})
	return at, owned
}

// firstDecisions waits until every partition of ps has a version decided
// after at (the record's timestamp is when the sequencer produced it),
// and returns the time to the first such version and to the last
// partition's first one.
func (c *changelog) firstDecisions(ctx context.Context, ps []int32, at time.Time) (first, all time.Duration) {
	c.t.Helper()
	return c.firstDecisionsNotBy(ctx, ps, at, -1)
}

// firstDecisionsNotBy is firstDecisions counting only the versions of
// other producers than producer id notBy (-1: all): a stopping owner's
// last commits after at are not its heir's.
func (c *changelog) firstDecisionsNotBy(ctx context.Context, ps []int32, at time.Time, notBy int64) (first, all time.Duration) {
	c.t.Helper()
	var firsts map[int32]time.Time
	canontest.Wait(c.t, ctx, fmt.Sprintf("decisions on partitions %v", ps), func() (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		firsts = map[int32]time.Time{}
		for _, p := range ps {
			for _, r := range slices.Backward(c.recs[p]) {
				if r.Timestamp.Before(at) {
					break
				}
				if canontest.Header(r, schemas.HeaderSchema) == schemas.SchemaVersionV1 && r.ProducerID != notBy {
					firsts[p] = r.Timestamp
				}
			}
		}
		return len(firsts) == len(ps), c.err
	})
	first = time.Duration(1<<63 - 1)
	for _, ts := range firsts {
		first = min(first, ts.Sub(at))
		all = max(all, ts.Sub(at))
	}
	return first, all
}

// TestIntegrationKillRecovery kills a sequencer with SIGKILL while its
// transaction is open, -kills times restarting it at once on the same
// data and -kills times leaving its partitions to the other instance,
// under steady load, with the production timeouts. It logs how long the
// killed instance's partitions waited for their next decision.
func TestIntegrationKillRecovery(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*recoveryKills)*2*time.Minute+3*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 6)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 24, 60, 100_000, 7)
	g.rate = 150
	// Production timeouts: 0 takes the sequencer's defaults.
	prod := []string{"--session-timeout", "0", "--transaction-timeout", "0"}
	a, b := newSeqProc(t, e, "a", prod...), newSeqProc(t, e, "b", prod...)
	a.Start(ctx)
	b.Start(ctx)
	g.allowUpTo(1)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions and ready", func() (bool, error) {
		return a.owned() > 0 && b.owned() > 0 && a.Ready() && b.Ready(), nil
	})
	adm := kadm.NewClient(e.cl)
	group := e.prefix + sequencer.DefaultGroup

	var restart, takeover [][2]time.Duration
	for i := range 2 * *recoveryKills {
		kind := "restart"
		if i%2 == 1 {
			kind = "takeover"
		}
		txnID := group + "-" + a.instanceID(ctx)
		at, owned := killInTransaction(t, ctx, adm, a, txnID)
		if kind == "restart" {
			a.Start(ctx)
		}
		first, all := cl.firstDecisions(ctx, owned, at)
		t.Logf("kill %d (%s) of a with partitions %v: first decision after %.2fs, on all its partitions after %.2fs",
			i+1, kind, owned, first.Seconds(), all.Seconds())
		if kind == "restart" {
			restart = append(restart, [2]time.Duration{first, all})
		} else {
			takeover = append(takeover, [2]time.Duration{first, all})
			a.Start(ctx)
		}
		canontest.Wait(t, ctx, "both owning partitions and ready", func() (bool, error) {
			return a.owned() > 0 && b.owned() > 0 && a.Ready() && b.Ready(), nil
		})
	}
	for _, s := range []struct {
		kind string
		ds   [][2]time.Duration
	}{{"restart", restart}, {"takeover", takeover}} {
		var first, all []float64
		for _, d := range s.ds {
			first, all = append(first, d[0].Seconds()), append(all, d[1].Seconds())
		}
		slices.Sort(first)
		slices.Sort(all)
		t.Logf("recovery after %d kills (%s): first decision median %.2fs max %.2fs %.2f; every partition median %.2fs max %.2fs %.2f",
			len(all), s.kind, median(first), first[len(first)-1], first, median(all), all[len(all)-1], all)
	}

	g.finish()
	finishAndCheck(t, ctx, e, g, cl, a, b)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
