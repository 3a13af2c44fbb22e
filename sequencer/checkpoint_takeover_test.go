package sequencer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/sequencer"
)

// TestIntegrationCheckpointTakeover: two `canon serve` sequencers share a
// checkpoint bucket (--checkpoint-url, a directory) and checkpoint the
// partitions they own under load; a is killed with SIGKILL in a
// transaction, and b, whose store holds nothing of a's partitions,
// restores them from a's checkpoints and reads only the changelog after
// them. The exactly-once invariants hold.
func TestIntegrationCheckpointTakeover(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const parts = 4
	e := newTopicsEnv(t, k.Brokers, parts)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 16, 40, 100_000, 13)
	g.rate = 300
	bucket := filepath.Join(t.TempDir(), "bucket")
	if err := os.Mkdir(bucket, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--checkpoint-url", "file://" + bucket, "--checkpoint-every", "500", "--checkpoint-interval", "2s"}
	a := newSeqProc(t, e, "a", flags...)
	b := newSeqProc(t, e, "b", flags...)
	a.Start(ctx)
	b.Start(ctx)
	g.allowUpTo(1)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions and ready", func() (bool, error) {
		return a.owned() > 0 && b.owned() > 0 && a.Ready() && b.Ready(), nil
	})
	owned := a.ownedFromLog()
	canontest.Wait(t, ctx, "a history on a's partitions and a's checkpoints of it", func() (bool, error) {
		n, err := a.Metric("canon_checkpoints_taken_total")
		return cl.records(owned) >= 3000 && err == nil && n >= float64(2*len(owned)), nil
	})
	before, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	restoredBefore := strings.Count(b.CurrentLog(), restoredFromCheckpoint)
	adm := kadm.NewClient(e.cl)
	txnID := e.prefix + sequencer.DefaultGroup + "-" + a.instanceID(ctx)
	at, owned := killInTransaction(t, ctx, adm, a, txnID)
	history := cl.records(owned)
	first, all := cl.firstDecisions(ctx, owned, at)
	after, err := b.Metric("canon_sequencer_restore_records_total")
	if err != nil {
		t.Fatal(err)
	}
	restored := strings.Count(b.CurrentLog(), restoredFromCheckpoint) - restoredBefore
	read := int(after - before)
	t.Logf("checkpoints: a killed with partitions %v (%d changelog records); b restored %d partitions from checkpoints, reading %d records after them; first decision after %.2fs, on all of them after %.2fs",
		owned, history, restored, read, first.Seconds(), all.Seconds())
	if restored < len(owned) || read*2 > history {
		t.Errorf("b restored %d of a's %d partitions from checkpoints and read %d of their %d records: want all from checkpoints and only the tail read",
			restored, len(owned), read, history)
	}
	a.Start(ctx)
	g.finish()
	finishAndCheck(t, ctx, e, g, cl, a, b)
}

// restoredFromCheckpoint is what the checkpoint package logs for each
// partition it restores.
const restoredFromCheckpoint = `msg="partition restored from a checkpoint"`
