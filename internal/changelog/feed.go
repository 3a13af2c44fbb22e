package changelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// FeedConfig configures a Feed.
type FeedConfig struct {
	Kafka  kafka.ClientConfig
	Topics kafka.TopicNames
	// PartitionCount is the partition count of canon.versions; the feed
	// follows all of them, and all of canon.rejected.
	PartitionCount int32
	// Start gives the first offset of canon.versions to read per
	// partition (a store's offsets, so that nothing the store lacks is
	// missed); partitions without one start at the end offsets read when
	// Run starts, and so does canon.rejected.
	Start map[int32]int64
	// Local reports whether an in-process writer of the store publishes
	// partition p now (the sequencer's Serves). While it does, and its
	// publications follow what the feed handed out, the feed fetches
	// nothing of p from the broker; once it stops, the feed fetches p
	// again from where it is, within LocalCheck. Nil: nothing is local.
	Local func(p int32) bool
	// LocalCheck is how often the partitions served locally are checked
	// with Local. Default 100ms.
	LocalCheck time.Duration
	// Limits bound decoded records; zero fields take schemas.DefaultLimits.
	Limits schemas.Limits
	Log    *slog.Logger
}

// Handler receives the feed's events in order, one batch at a time;
// at holds the feed's positions after them. It runs with the feed
// locked: it must not block, nor call the feed.
type Handler func(evs []Event, at Positions)

// Feed is a process's one reader of canon.versions and canon.rejected:
// every component that follows the changelog (the producer's
// ?wait=applied, the websocket hub) subscribes to it instead of fetching
// the same records again.
//
// A partition whose store writer runs in the process (the sequencer that
// owns it) is fed by that writer, which calls Publish after the Kafka
// commit and the store write, so the records reach the subscribers
// without a fetch back from the broker and are readable when they do.
// The others, and a local partition whose publications do not follow
// what the feed handed out (after a restore, a rebalance or a failed
// store write), are fetched from the broker. Both sources are deduplicated
// by offset: a subscriber sees each record of canon.versions once, in
// offset order per partition, whichever delivered it first.
// canon.rejected is always fetched.
type Feed struct {
	cfg     FeedConfig
	started chan struct{}
	running chan struct{} // closed by the first Run

	mu     sync.Mutex
	subs   []subscription
	tail   *Tail
	rparts int32
	// next is, per partition of canon.versions, the offset below which
	// every committed record was handed out; paused, the partitions the
	// broker does not fetch now because they are published locally.
	next   []int64
	paused map[int32]bool
	// seek is, per paused partition, where the broker fetches it again
	// from when it resumes: the position, or one below it after an
	// in-process transaction, whose commit marker (at the position - 1)
	// may not be in the log yet: fetching past the log's end would reset
	// the fetch.
	seek map[int32]int64
	// rnext is the position in canon.rejected, per partition.
	rnext   []int64
	stopped error
}

type subscription struct {
	handle  Handler
	stopped func(error)
}

// NewFeed returns a feed; Run follows the changelog.
func NewFeed(cfg FeedConfig) (*Feed, error) {
	if cfg.Topics.Versions == "" || cfg.Topics.Rejected == "" {
		return nil, errors.New("changelog: feed: the versions and rejected topics are required")
	}
	if cfg.PartitionCount <= 0 {
		return nil, errors.New("changelog: feed: PartitionCount not set")
	}
	for p := range cfg.Start {
		if p < 0 || p >= cfg.PartitionCount {
			return nil, fmt.Errorf("changelog: feed: start of partition %d, which is not one of the %d of %s", p, cfg.PartitionCount, cfg.Topics.Versions)
		}
	}
	if cfg.LocalCheck <= 0 {
		cfg.LocalCheck = 100 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = discard
	}
	return &Feed{cfg: cfg, started: make(chan struct{}), running: make(chan struct{}), paused: map[int32]bool{},
		seek: map[int32]int64{}}, nil
}

// Subscribe adds a subscriber: handle gets every batch from the feed's
// start on, stopped is called once if the feed stops following the
// changelog (not when Run's context ends). Subscribe before Run.
func (f *Feed) Subscribe(handle Handler, stopped func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, subscription{handle, stopped})
}

// Started is closed once the feed knows its positions and follows the
// changelog.
func (f *Feed) Started() <-chan struct{} { return f.started }

// PartitionCount is the partition count of canon.versions.
func (f *Feed) PartitionCount() int32 { return f.cfg.PartitionCount }

// RejectedPartitions is the partition count of canon.rejected, once
// started.
func (f *Feed) RejectedPartitions() int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rparts
}

// Ready reports whether the feed follows the changelog and Kafka answers.
func (f *Feed) Ready(ctx context.Context) error {
	f.mu.Lock()
	tail, stopped := f.tail, f.stopped
	f.mu.Unlock()
	switch {
	case stopped != nil:
		return fmt.Errorf("the changelog feed stopped: %w", stopped)
	case tail == nil:
		return errors.New("the changelog feed has not started")
	}
	return tail.Client().Ping(ctx)
}

// Positions are the feed's positions after a batch, valid during the
// Handler call.
type Positions struct{ f *Feed }

// Next returns the offset of a partition of canon.versions or
// canon.rejected below which every committed record was handed out;
// ok is false for a topic or partition the feed does not follow.
// After an in-process transaction, it is past the transaction's commit
// marker (see PublishCommitted).
func (a Positions) Next(topic string, p int32) (int64, bool) {
	var next []int64
	switch topic {
	case a.f.cfg.Topics.Versions:
		next = a.f.next
	case a.f.cfg.Topics.Rejected:
		next = a.f.rnext
	}
	if p < 0 || int(p) >= len(next) {
		return 0, false
	}
	return next[p], true
}

// Partitions is the number of partitions of topic the feed follows.
func (a Positions) Partitions(topic string) int {
	switch topic {
	case a.f.cfg.Topics.Versions:
		return len(a.f.next)
	case a.f.cfg.Topics.Rejected:
		return len(a.f.rnext)
	}
	return 0
}

// Publish hands the subscribers records of canon.versions that an
// in-process writer of partition p's store wrote: evs, in offset order;
// from is the store's offset of p before the write, and next the offset
// below which every committed record of p is in evs or below from. Call
// it after the store write, never before: what it hands out is
// announced as readable.
//
// When the store was at or below the feed's position (from <= the
// position), the records above the position are handed out and the
// broker stops fetching p; otherwise the records between are only in
// the broker, which fetches p until it caught up.
func (f *Feed) Publish(p int32, from int64, evs []Event, next int64) {
	f.publish(p, from, evs, next, next)
}

func (f *Feed) publish(p int32, from int64, evs []Event, next, seek int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tail == nil || f.stopped != nil || p < 0 || int(p) >= len(f.next) {
		return
	}
	if from > f.next[p] {
		f.resumeLocked(p)
		return
	}
	start := 0
	for start < len(evs) && evs[start].Offset < f.next[p] {
		start++
	}
	if next > f.next[p] {
		f.next[p], f.seek[p] = next, seek
	}
	f.deliverLocked(evs[start:])
	if !f.paused[p] {
		f.paused[p] = true
		f.tail.Client().PauseFetchPartitions(map[string][]int32{f.cfg.Topics.Versions: {p}})
	}
}

// PublishCommitted is Publish for the records of a transaction that the
// in-process writer committed, the last of them at offset last, and
// wrote to its store: the feed's position becomes last+2. The slot after
// a transaction's last record is its commit marker, or a record of an
// aborted (fenced) transaction, which read committed never shows; no
// committed record of another writer comes before that marker, because
// a new owner restores the partition up to its last stable offset, which
// an open transaction holds back, before it writes.
func (f *Feed) PublishCommitted(p int32, from int64, evs []Event, last int64) {
	f.publish(p, from, evs, last+2, last+1)
}

// resumeLocked has the broker fetch p again from the feed's position.
func (f *Feed) resumeLocked(p int32) {
	if !f.paused[p] {
		return
	}
	delete(f.paused, p)
	at := f.next[p]
	if seek, ok := f.seek[p]; ok {
		at = min(at, seek)
		delete(f.seek, p)
	}
	cl := f.tail.Client()
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{f.cfg.Topics.Versions: {p: {Epoch: -1, Offset: at}}})
	cl.ResumeFetchPartitions(map[string][]int32{f.cfg.Topics.Versions: {p}})
}

func (f *Feed) deliverLocked(evs []Event) {
	at := Positions{f}
	for _, s := range f.subs {
		s.handle(evs, at)
	}
}

// Run follows the changelog until ctx ends or it cannot; it returns nil
// when ctx ended.
func (f *Feed) Run(ctx context.Context) error {
	select {
	case <-f.running:
		return errors.New("changelog: feed: Run called twice")
	default:
		close(f.running)
	}
	err := f.run(ctx)
	if ctx.Err() != nil {
		err = nil
	}
	f.mu.Lock()
	f.stopped = cmpErr(err, context.Canceled)
	subs := f.subs
	f.mu.Unlock()
	if err != nil {
		for _, s := range subs {
			if s.stopped != nil {
				s.stopped(err)
			}
		}
	}
	return err
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

func (f *Feed) run(ctx context.Context) error {
	tail, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer tail.Close()
	close(f.started)
	var wg sync.WaitGroup
	wg.Add(1)
	lctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	go func() {
		defer wg.Done()
		f.checkLocal(lctx)
	}()
	for {
		evs, err := tail.Poll(ctx)
		if err != nil {
			return fmt.Errorf("follow the changelog: %w", err)
		}
		f.fetched(evs)
	}
}

// open reads where to start and opens the tail there.
func (f *Feed) open(ctx context.Context) (*Tail, error) {
	cl, err := f.cfg.Kafka.Aux("feed").NewClient()
	if err != nil {
		return nil, fmt.Errorf("changelog: kafka client: %w", err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, f.cfg.Topics.Versions, f.cfg.Topics.Rejected)
	if err == nil {
		err = ends.Error()
	}
	cl.Close()
	if err != nil {
		return nil, fmt.Errorf("changelog: read the end offsets of %s and %s: %w", f.cfg.Topics.Versions, f.cfg.Topics.Rejected, err)
	}
	start, rstart := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == f.cfg.Topics.Versions {
			start[o.Partition] = o.Offset
		} else {
			rstart[o.Partition] = o.Offset
		}
	})
	if int32(len(start)) != f.cfg.PartitionCount {
		return nil, fmt.Errorf("changelog: %s has %d partitions, not %d", f.cfg.Topics.Versions, len(start), f.cfg.PartitionCount)
	}
	for p, o := range f.cfg.Start {
		start[p] = o
	}
	tail, err := New(Config{
		Kafka: f.cfg.Kafka, Topics: f.cfg.Topics, PartitionCount: f.cfg.PartitionCount, Start: start,
		Rejected: true, RejectedPartitions: int32(len(rstart)), RejectedStart: rstart, Limits: f.cfg.Limits, Log: f.cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tail, f.rparts = tail, int32(len(rstart))
	f.next, f.rnext = make([]int64, len(start)), make([]int64, len(rstart))
	for p, o := range start {
		f.next[p] = o
	}
	for p, o := range rstart {
		f.rnext[p] = o
	}
	return tail, nil
}

// fetched hands out what the broker delivered, without the records of
// canon.versions that a local publication already handed out.
func (f *Feed) fetched(evs []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := evs[:0]
	for _, ev := range evs {
		if ev.Topic == f.cfg.Topics.Versions {
			if ev.Offset < f.next[ev.Partition] {
				continue
			}
			f.next[ev.Partition] = ev.Offset + 1
		}
		out = append(out, ev)
	}
	for p := range f.next {
		if n, ok := f.tail.Next(f.cfg.Topics.Versions, int32(p)); ok {
			f.next[p] = max(f.next[p], n)
		}
	}
	for p := range f.rnext {
		if n, ok := f.tail.Next(f.cfg.Topics.Rejected, int32(p)); ok {
			f.rnext[p] = max(f.rnext[p], n)
		}
	}
	f.deliverLocked(out)
}

// checkLocal has the broker fetch again the partitions no longer
// published locally.
func (f *Feed) checkLocal(ctx context.Context) {
	t := time.NewTicker(f.cfg.LocalCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		for p := range f.paused {
			if f.cfg.Local == nil || !f.cfg.Local(p) {
				f.resumeLocked(p)
			}
		}
		f.mu.Unlock()
	}
}
