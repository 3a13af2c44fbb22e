package sequencer

import (
	"sync"
	"time"
)

// maxOverlaid bounds the mutations the decider's overlay holds across
// transactions while the store writer has not caught up: past it, the
// next transaction waits for the writer and starts from an empty
// overlay, so the overlay's memory stays bounded under a steady load.
const maxOverlaid = 4 * DefaultMaxBatchRecords

// storeWriter writes committed transactions to the store, one after
// the other, in their commit order, on a goroutine of its own: the poll
// loop decides the next transaction meanwhile. That is correct because
// the decider's overlay still holds every transaction the store does not
// (the poll loop resets it only after drain), and the store is never
// ahead of Kafka (a transaction is queued only once committed). Anything
// that changes what the overlay stands on (a restore, an abort, the end
// of the session) or hands a partition's store to somebody else (a
// revoke, after which a standby may follow the partition) drains the
// writer first.
//
// A partition whose write failed is marked for restore, and the writer
// skips it until the restore (which reads the changelog from the store's
// offset, so the skipped transactions too) is done: a later write must
// never land after a hole.
type storeWriter struct {
	s    *Sequencer
	jobs chan storeJob
	// last is closed when the last queued job is written.
	mu   sync.Mutex
	last chan struct{}
	// failed are the partitions skipped until their restore; the
	// writer's goroutine only, or after drain.
	failed map[int32]bool
	done   chan struct{}
}

type storeJob struct {
	b    *batch
	done chan struct{}
}

func newStoreWriter(s *Sequencer) *storeWriter {
	w := &storeWriter{s: s, jobs: make(chan storeJob, 8), failed: map[int32]bool{}, done: make(chan struct{})}
	w.last = make(chan struct{})
	close(w.last)
	go w.run()
	return w
}

func (w *storeWriter) run() {
	defer close(w.done)
	for j := range w.jobs {
		start := time.Now()
		w.s.store(j.b, w.failed)
		w.s.m.phase.WithLabelValues(phaseStore).Observe(time.Since(start).Seconds())
		close(j.done)
	}
}

// write queues a committed transaction for the store.
func (w *storeWriter) write(b *batch) {
	done := make(chan struct{})
	w.jobs <- storeJob{b: b, done: done}
	w.mu.Lock()
	w.last = done
	w.mu.Unlock()
}

func (w *storeWriter) lastDone() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// idle reports whether every queued transaction is written.
func (w *storeWriter) idle() bool {
	select {
	case <-w.lastDone():
		return true
	default:
		return false
	}
}

// drain waits until every queued transaction is written. Any
// goroutine may call it; a rebalance callback does.
func (w *storeWriter) drain() {
	if w != nil {
		<-w.lastDone()
	}
}

// restored lets the writer write partition p again; poll loop only,
// after drain.
func (w *storeWriter) restored(p int32) {
	if w != nil {
		delete(w.failed, p)
	}
}

// close writes what is queued and stops the writer.
func (w *storeWriter) close() {
	close(w.jobs)
	<-w.done
}
