package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// applied is a partition's applied position, the offset Offset reports,
// kept in memory so that readers of the changelog can wait for the store
// to hold a record they read elsewhere: a node must not announce a version
// (on a websocket, or as a push's outcome) that its own read API cannot
// serve yet, and the store is written just after Kafka commits.
type applied struct {
	// next is the offset after the last applied record; -1 while unknown
	// (not read from the database yet), and 0 for a partition the store
	// holds nothing of.
	next atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, when next moves
}

// appliedPosition returns partition p's applied position and a channel
// closed when it changes, reading it from the database the first time.
func (s *Store) appliedPosition(p int32) (int64, <-chan struct{}, error) {
	a := &s.applied[p]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.changed == nil {
		a.changed = make(chan struct{})
	}
	next := a.next.Load()
	if next < 0 {
		o, _, err := getOffset(s.db, offsetKey(p))
		if err != nil {
			return 0, nil, fmt.Errorf("read offset of partition %d: %w", p, err)
		}
		next = o
		a.next.Store(next)
	}
	return next, a.changed, nil
}

// setApplied records partition p's applied position after a commit or a
// drop, and wakes the waiters. Writers of p call it under their lock, in
// the order they commit.
func (s *Store) setApplied(p int32, next int64) {
	a := &s.applied[p]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next.Load() == next {
		return
	}
	a.next.Store(next)
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
}

// Applied returns what Offset returns, from memory after the first call
// for the partition: a reader of the changelog that saw the record at
// offset o of partition p checks next > o (or waits with WaitApplied)
// before telling anyone the store has it.
func (s *Store) Applied(p int32) (next int64, err error) {
	if err := s.checkPartition(p); err != nil {
		return 0, err
	}
	if n := s.applied[p].next.Load(); n >= 0 {
		return n, nil
	}
	next, _, err = s.appliedPosition(p)
	return next, err
}

// WaitApplied waits until the store holds partition p's changelog below
// offset next (Offset reaches next), or ctx ends.
func (s *Store) WaitApplied(ctx context.Context, p int32, next int64) error {
	if err := s.checkPartition(p); err != nil {
		return err
	}
	if s.applied[p].next.Load() >= next {
		return nil
	}
	for {
		at, changed, err := s.appliedPosition(p)
		if err != nil {
			return err
		}
		if at >= next {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for the store to reach offset %d of partition %d (it is at %d): %w", next, p, at, ctx.Err())
		}
	}
}
