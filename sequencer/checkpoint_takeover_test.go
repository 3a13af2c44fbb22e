package sequencer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/canontest"
)

// TestIntegrationCheckpointTakeover: two `canon serve` sequencers share a
// checkpoint bucket (--checkpoint-url, a directory) and checkpoint the
// partitions they own under load; a is killed with SIGKILL in a
// transaction, and b, whose store holds nothing of a's partitions,
// restores them from a's checkpoints and reads only the changelog after
// them. The exactly-once invariants hold.
func TestIntegrationCheckpointTakeover(t *testing.T) {
	r := newTakeoverEnv(t, 4, 13)
	bucket := filepath.Join(t.TempDir(), "bucket")
	if err := os.Mkdir(bucket, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--checkpoint-url", "file://" + bucket, "--checkpoint-every", "500", "--checkpoint-interval", "2s"}
	a := newSeqProc(t, r.e, "a", flags...)
	b := newSeqProc(t, r.e, "b", flags...)
	a.Start(r.ctx)
	b.Start(r.ctx)
	r.startLoad()
	r.waitOwningAndWatching(a, b)
	owned := a.ownedFromLog()
	canontest.Wait(t, r.ctx, "a history on a's partitions and a's checkpoints of it", func() (bool, error) {
		n, err := a.Metric("canon_checkpoints_taken_total")
		return r.cl.records(owned) >= 3000 && err == nil && n >= float64(2*len(owned)), nil
	})
	restoredBefore := strings.Count(b.CurrentLog(), restoredFromCheckpoint)
	to := r.kill(a, b)
	restored := strings.Count(b.CurrentLog(), restoredFromCheckpoint) - restoredBefore
	t.Logf("checkpoints: a killed with partitions %v (%d changelog records); b restored %d partitions from checkpoints, reading %d records after them; first decision after %.2fs, on all of them after %.2fs",
		to.owned, to.history, restored, to.read, to.first.Seconds(), to.all.Seconds())
	if restored < len(to.owned) || to.read*2 > to.history {
		t.Errorf("b restored %d of a's %d partitions from checkpoints and read %d of their %d records: want all from checkpoints and only the tail read",
			restored, len(to.owned), to.read, to.history)
	}
	r.restartAndCheck(a, b)
}

// restoredFromCheckpoint is what the checkpoint package logs for each
// partition it restores.
const restoredFromCheckpoint = `msg="partition restored from a checkpoint"`
