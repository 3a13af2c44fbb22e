package sequencer

import (
	"context"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/store"
)

// The check of a restored checkpoint after the restore (docs/checkpoints.md):
// a restore from a local bucket links the checkpoint's tables into the
// store and returns once the changelog's tail is read, before every byte
// of them is checked against the manifest's CRC-32C; the check goes on in
// the background while the partition is decided on. Pebble guards the
// reads meanwhile: each block's own checksum is checked when it is read,
// so a decision never rests on a corrupt block (it is a read error,
// handled as below). When the check fails, the partition stops being
// decided on and is restored again: its local state is dropped, and the
// checkpoint bucket, which remembers the corrupt manifest, falls back to
// an older checkpoint or to the changelog's first record. What this owner
// decided meanwhile is in the changelog, so the new restore recovers it.

// restoredCheck is the running check of a checkpoint restored into an
// owned partition.
type restoredCheck struct {
	done chan struct{} // closed when the check ended
}

// checkRestored runs check, the check of the checkpoint restored into
// partition p by the restore of mark generation gen, in the background.
// The check reads local files only and is not ended with ctx: a restore
// of p that starts meanwhile waits for it (waitCheck).
func (s *Sequencer) checkRestored(ctx context.Context, p int32, gen uint64, check func(context.Context) error) {
	c := &restoredCheck{done: make(chan struct{})}
	s.mu.Lock()
	s.checks[p] = c
	s.m.checksRunning.Set(float64(len(s.checks)))
	s.mu.Unlock()
	go func() {
		defer close(c.done)
		start := time.Now()
		err := check(context.WithoutCancel(ctx))
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.checks[p] == c {
			delete(s.checks, p)
		}
		s.m.checksRunning.Set(float64(len(s.checks)))
		if err == nil {
			s.log.Info("the restored checkpoint passed its check", "partition", p, "took", time.Since(start))
			return
		}
		s.m.checksFailed.Inc()
		s.corrupt[p] = true
		// The restore of gen brought p up, or is still under way (its
		// mark is then replaced, so that it does not count as done).
		if !s.owned[p] || s.restoredGen[p] != gen && s.needRestore[p] != gen {
			// Another restore of p comes (or p went to another owner):
			// that restore, here, drops the partition first.
			s.log.Error("a restored checkpoint is corrupt; the partition's local state is dropped at its next restore",
				"partition", p, "err", err)
			return
		}
		s.log.Error("a restored checkpoint is corrupt: the partition stops deciding and is restored again, from an older checkpoint or the changelog",
			"partition", p, "err", err)
		s.markRestoreLocked(p)
		if s.wake != nil {
			s.wake()
		}
	}()
}

// checkRunning reports whether the check of a checkpoint restored into
// partition p is still running.
func (s *Sequencer) checkRunning(p int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks[p] != nil
}

// prepareRestore readies partition p's local state for a restore: a
// check of the checkpoint an earlier restore brought in, if it still
// runs, is waited for (it decides whether that state is kept), and a
// state found corrupt is dropped, so that the restore starts from an
// older checkpoint or the changelog's first record.
func (s *Sequencer) prepareRestore(ctx context.Context, p int32) error {
	s.mu.Lock()
	c := s.checks[p]
	s.mu.Unlock()
	if c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	corrupt := s.corrupt[p]
	s.mu.Unlock()
	if !corrupt {
		return nil
	}
	if err := s.cfg.Store.DropPartition(p); err != nil {
		return err
	}
	s.log.Warn("dropped the partition's local state, found corrupt, before its restore", "partition", p)
	s.mu.Lock()
	delete(s.corrupt, p)
	s.mu.Unlock()
	return nil
}

// storeCorrupt reports whether err is the store's data failing its own
// checks: a block whose checksum fails in Pebble, or data that does not
// decode or match its hash. Deciding again over the same state would fail
// again; the partition must be restored from elsewhere.
func storeCorrupt(err error) bool {
	return pebble.IsCorruptionError(err) || errors.Is(err, store.ErrCorrupt)
}

// corruptWhileDeciding handles a decision of partition p that failed on
// corrupt store data: the partition stops deciding and is restored again
// with its local state dropped, rather than failing every transaction
// that reaches it.
func (s *Sequencer) corruptWhileDeciding(p int32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.checksFailed.Inc()
	s.corrupt[p] = true
	if s.owned[p] {
		s.markRestoreLocked(p)
	}
	s.log.Error("the store's data of the partition is corrupt: the partition stops deciding and is restored again, from a checkpoint or the changelog",
		"partition", p, "err", err)
}
