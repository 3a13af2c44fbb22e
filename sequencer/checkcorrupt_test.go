package sequencer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/internal/testenv"
)

// TestIntegrationCorruptCheckpointAfterRestore: on the real broker, a
// owns one partition and checkpoints it into a local bucket under load,
// the last checkpoint of everything it decided, then stops; one byte is
// changed in a data block of the largest table that only the newest
// checkpoint holds. b, on an empty store, restores the partition from
// that checkpoint (no tail to read): the restore returns before the
// table's check is waited for, the load goes on, the check fails (or a
// decision reads the corrupt block first), and b stops deciding the
// partition, drops it and restores it again from the older checkpoint
// (the bucket remembers the corrupt one) plus the changelog after it,
// including what b decided meanwhile. Every mutation is decided exactly
// once, and b's store equals the changelog.
func TestIntegrationCorruptCheckpointAfterRestore(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 1)
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 20, 60, 40, 11)
	bucket := filepath.Join(t.TempDir(), "bucket")
	if err := os.Mkdir(bucket, 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--checkpoint-url", "file://" + bucket, "--checkpoint-every", "300", "--checkpoint-interval", "1s"}
	a := newSeqProc(t, e, "a", flags...)
	a.Start(ctx)
	startLoad(t, ctx, g, cl)
	g.allowUpTo(0.6)
	g.waitProduced(ctx, 0.6)
	dir := filepath.Join(bucket, filepath.FromSlash(checkpoint.DefaultPrefix+"manifests/"+e.names.Versions+"/00000"))
	manifests := func() []string {
		names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		slices.Sort(names) // zero-padded offsets: the newest last
		return names
	}
	read := func(name string) *checkpoint.Manifest {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var m checkpoint.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	// a checkpoints everything it decided (an interval after its last
	// change), so that b's restore has no tail to read: the corrupt
	// table is found by its check after the restore, or by a decision.
	canontest.Wait(t, ctx, "two checkpoints of a's partition, the newest of everything decided", func() (bool, error) {
		names := manifests()
		if len(names) < 2 || cl.outcomes() < g.acked.Load() {
			return false, nil
		}
		cl.mu.Lock()
		end := cl.next[0]
		cl.mu.Unlock()
		// A store's offset is after its last record; the commit
		// marker after it is the one offset it may be behind.
		return read(names[len(names)-1]).Offset+1 >= end, nil
	})
	a.Stop()

	// The newest manifest's largest table of its own.
	names := manifests()
	newer := read(names[len(names)-1])
	var older []*checkpoint.Manifest
	for _, name := range names[:len(names)-1] {
		older = append(older, read(name))
	}
	victim := canontest.LargestOwnFile(t, newer, older...)
	canontest.CorruptFile(t, filepath.Join(bucket, filepath.FromSlash(checkpoint.DefaultPrefix+"files/"+victim.SHA256)))
	t.Logf("corrupted table %s (%d bytes) of the checkpoint at offset %d", victim.Name, victim.Size, newer.Offset)

	b := newSeqProc(t, e, "b", flags...)
	b.Start(ctx)
	g.allowUpTo(1)
	canontest.Wait(t, ctx, "b finding the restored checkpoint corrupt", func() (bool, error) {
		n, err := b.Metric("canon_sequencer_checkpoint_checks_failed_total")
		return err == nil && n >= 1, nil
	})
	finishAndCheck(t, ctx, e, g, cl, b)

	log := b.CurrentLog()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "checkpoint") || strings.Contains(line, "partition restored") || strings.Contains(line, "corrupt") {
			t.Log(line)
		}
	}
	// The check fails after the restore returned (or a decision reads
	// the corrupt block first), and b restores again.
	checked := strings.Contains(log, `msg="a restored checkpoint is corrupt: the partition stops deciding and is restored again, from an older checkpoint or the changelog"`)
	decided := strings.Contains(log, `msg="the store's data of the partition is corrupt: the partition stops deciding and is restored again, from a checkpoint or the changelog"`)
	t.Logf("found corrupt by the check after the restore: %v; by a decision: %v", checked, decided)
	if !checked && !decided || !strings.Contains(log, `msg="dropped the partition's local state, found corrupt, before its restore"`) {
		t.Error("b's log does not say the restored checkpoint was found corrupt after its restore, and dropped")
	}
	if n := strings.Count(log, `msg="partition restored from a checkpoint"`); n < 2 || !strings.Contains(log, "its files failed their check after an earlier restore") {
		t.Errorf("b restored from a checkpoint %d times; want the newest, then an older one, the newest skipped as known corrupt", n)
	}
}
