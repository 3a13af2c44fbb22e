package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// outcome is what became of one pushed mutation, and where the
// changelog holds it.
type outcome struct {
	wire.Outcome

	// next is the offset of canon.versions (in the mutation's partition)
	// that a store must reach to hold the outcome: after the version that
	// recorded it, or after the last version the watcher had read when it
	// settled a duplicate; 0 when the outcome is not in canon.versions.
	next int64
}

// watcher follows canon.versions and canon.rejected from the end, for two
// things: the owners of client groups and the groups of clients, so that a
// push into another principal's group, or of a client of another group, is
// refused (409) before anything is written, and the outcomes of written
// mutations, for ?wait=applied.
//
// The ingest's view of owners covers the groups and clients bound since
// it started; the sequencer, which reads them from the store, is the
// authority and rejects the rest (reason unauthorized).
//
// A mutation's outcome is the version or the rejected record that names
// its offset. A duplicate produces neither: once the sequencer group's
// committed offset is past the mutation, its outputs are committed too, and
// when the tail has read both topics up to their end offsets of that
// moment without finding one, the mutation was a duplicate.
type watcher struct {
	cfg *Config
	// feed is the process's changelog feed; own when the producer runs
	// it (Config.Changelog is nil).
	feed   *changelog.Feed
	own    bool
	adm    *kadm.Client
	group  string
	topics struct{ mutations, versions, rejected string }
	vparts int32
	rparts int32
	retain time.Duration
	// recheck is how often checkDuplicates looks for waiters due a
	// check; firstCheck how old a waiter is at its first, maxCheck the
	// longest interval between two of one waiter's.
	recheck, firstCheck, maxCheck time.Duration
	// dead is closed when the feed stopped following the changelog.
	dead chan struct{}
	// answered, when set, is told the client of each waiting push an
	// outcome settled (rounds.answered), under mu.
	answered func(client string)

	mu     sync.Mutex
	owners map[groupKey]string
	// clients are the client groups of clients (groupKey.group is the
	// client).
	clients map[groupKey]string
	recent  map[position]outcome
	expiry  []expiring // recent's keys, oldest first
	waits   map[position][]*waiter
	// decided is, per partition of canon.mutations, the highest input
	// offset that a version read by the feed names: every mutation below
	// it was decided, so a waiter below it that is not settled is a
	// rejection the feed has not handed out yet or a duplicate, and is
	// due a check at once.
	decided map[int32]int64
	// versionEnd is, per partition of canon.versions, the offset after
	// the last version record the feed handed out: a store that reached
	// it holds every outcome the watcher has seen there, which is where
	// a duplicate's first decision is. (The feed's position can be past
	// a commit marker, an offset no store reaches before the next
	// transaction.)
	versionEnd map[int32]int64
	// read is, per topic and partition, the feed's position (the offset
	// below which every committed record was handled), copied under mu
	// with each batch of its events.
	read    map[string][]int64
	stopped error // why the watcher stopped, if it did
	// started is set once run has the feed's positions and an admin
	// client: adm, rparts and read are set then, and not before.
	started bool
}

type groupKey struct{ org, project, group string }

type position struct {
	partition int32
	offset    int64
}

type expiring struct {
	pos position
	at  time.Time
}

type waiter struct {
	pos   position
	since time.Time
	done  chan outcome
	// ends are the end offsets of the versions and rejected partitions
	// that hold the mutation's outputs, once the sequencer committed past
	// it; nil until then.
	ends *[2]int64
	// check is when the waiter is next due a duplicate check, and
	// interval the wait before the one after it (doubling up to
	// maxCheck).
	check    time.Time
	interval time.Duration
	// last marks the waiter of a push's last mutation, which stands
	// for the push in answered; client is that mutation's client.
	last   bool
	client string
}

// maxOwners bounds the remembered group owners.
const maxOwners = 1 << 20

// newWatcher returns a watcher subscribed to cfg.Changelog, or to a
// feed of its own, that follows nothing until run.
func newWatcher(cfg *Config) (*watcher, error) {
	w := &watcher{
		cfg: cfg, group: cfg.SequencerGroup, retain: 2 * time.Minute, dead: make(chan struct{}),
		recheck: 20 * time.Millisecond, firstCheck: 100 * time.Millisecond, maxCheck: time.Second,
		owners: map[groupKey]string{}, clients: map[groupKey]string{}, recent: map[position]outcome{}, waits: map[position][]*waiter{},
		decided:    map[int32]int64{},
		versionEnd: map[int32]int64{},
	}
	w.topics.mutations, w.topics.versions, w.topics.rejected = cfg.Topics.Mutations, cfg.Topics.Versions, cfg.Topics.Rejected
	w.feed = cfg.Changelog
	if w.feed == nil {
		feed, err := changelog.NewFeed(changelog.FeedConfig{Kafka: cfg.Kafka.Aux("tail"), Topics: cfg.Topics, PartitionCount: cfg.Partitions,
			Limits: cfg.Limits, Log: cfg.Log})
		if err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
		w.feed, w.own = feed, true
	} else if w.feed.PartitionCount() != cfg.Partitions {
		return nil, fmt.Errorf("producer: the changelog feed follows %d partitions, not %d", w.feed.PartitionCount(), cfg.Partitions)
	}
	w.vparts = cfg.Partitions
	w.feed.Subscribe(w.handle, func(err error) {
		w.stop(err)
		close(w.dead)
	})
	return w, nil
}

// following reports whether run started: the watcher then sees the
// outcomes of what is written from now on.
func (w *watcher) following() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started
}

// errNotFollowing answers a push with ?wait=applied before the watcher
// follows the changelog: nothing is written, the client retries.
func (w *watcher) errNotFollowing() *wire.Error {
	if w.following() {
		return nil
	}
	return &wire.Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, RetryAfter: 1,
		Message: "this producer is starting and does not follow " + w.topics.versions + " yet; nothing was written",
		Hint:    "retry after Retry-After, or push without wait=applied"}
}

// run runs the watcher's own feed, if it has one, waits up to
// startTimeout for the feed to start, and then settles duplicates until
// ctx ends or the feed stops; it returns why it stopped, nil when ctx
// ended.
func (w *watcher) run(ctx context.Context, startTimeout time.Duration) error {
	fctx, cancel := context.WithCancel(ctx)
	var feeding sync.WaitGroup
	defer feeding.Wait()
	defer cancel()
	failed := make(chan error, 1)
	if w.own {
		feeding.Add(1)
		go func() {
			defer feeding.Done()
			if err := w.feed.Run(fctx); err != nil {
				failed <- err
			}
		}()
	}
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-w.feed.Started():
	case err := <-failed:
		return err
	case <-w.dead:
		return w.stoppedErr()
	case <-timer.C:
		err := fmt.Errorf("producer: the changelog feed did not read the end offsets of %s and %s within %v", w.topics.versions, w.topics.rejected, startTimeout)
		w.stop(err)
		return err
	case <-ctx.Done():
		return nil
	}
	cl, err := w.cfg.Kafka.Aux("watch").NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	rparts := w.feed.RejectedPartitions()
	w.mu.Lock()
	w.adm, w.rparts = kadm.NewClient(cl), rparts
	if w.read == nil {
		w.read = map[string][]int64{w.topics.versions: make([]int64, w.vparts), w.topics.rejected: make([]int64, rparts)}
		for _, next := range w.read {
			for p := range next {
				next[p] = -1
			}
		}
	}
	w.started = true
	w.mu.Unlock()
	dctx, stopChecking := context.WithCancel(ctx)
	defer stopChecking()
	go func() {
		select {
		case <-w.dead:
			stopChecking()
		case <-dctx.Done():
		}
	}()
	w.checkDuplicates(dctx)
	if ctx.Err() != nil {
		return nil
	}
	return w.stoppedErr()
}

func (w *watcher) stoppedErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return cmp.Or(w.stopped, errors.New("the changelog feed stopped"))
}

// handle takes a batch of the feed's events; the feed is locked.
func (w *watcher) handle(evs []changelog.Event, at changelog.Positions) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range evs {
		w.event(&evs[i])
	}
	if w.read == nil {
		w.read = map[string][]int64{w.topics.versions: make([]int64, w.vparts), w.topics.rejected: make([]int64, at.Partitions(w.topics.rejected))}
	}
	for topic, next := range w.read {
		for p := range next {
			next[p] = -1
			if n, ok := at.Next(topic, int32(p)); ok {
				next[p] = n
			}
		}
	}
	w.settleDuplicates()
	w.expire()
}

// stop fails the pending waits: the watcher no longer sees outcomes.
func (w *watcher) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = err
	for pos, ws := range w.waits {
		for _, wt := range ws {
			close(wt.done)
		}
		delete(w.waits, pos)
	}
}

func (w *watcher) event(ev *changelog.Event) {
	switch {
	case ev.Version != nil:
		v := ev.Version
		w.versionEnd[ev.Partition] = max(w.versionEnd[ev.Partition], ev.Offset+1)
		for _, m := range v.Mutations {
			if m.ClientGroup != "" && m.Principal != "" {
				k := groupKey{v.Org, v.Project, m.ClientGroup}
				if _, ok := w.owners[k]; !ok {
					if len(w.owners) >= maxOwners {
						clear(w.owners) // the sequencer still checks every mutation
					}
					w.owners[k] = m.Principal
				}
			}
			if m.ClientGroup != "" {
				// As the store binds it: a client's first group is its group.
				k := groupKey{v.Org, v.Project, m.Client}
				if _, ok := w.clients[k]; !ok {
					if len(w.clients) >= maxOwners {
						clear(w.clients)
					}
					w.clients[k] = m.ClientGroup
				}
			}
			if m.Offset > w.decided[ev.Partition] {
				w.decided[ev.Partition] = m.Offset
			}
			o := outcome{Outcome: wire.Outcome{Written: wire.Written{Client: m.Client, ID: m.ID, Partition: ev.Partition, Offset: m.Offset},
				Status: wire.OutcomeApplied, Branch: v.Branch, Version: v.Version, Error: m.Error, Code: m.Code}, next: ev.Offset + 1}
			if m.Status == schemas.StatusError {
				o.Status = wire.OutcomeError
			}
			w.settle(o)
		}
	case ev.Rejected != nil && ev.Rejected.Topic == w.topics.mutations:
		r := ev.Rejected
		o := outcome{Outcome: wire.Outcome{Written: wire.Written{Partition: r.Partition, Offset: r.Offset}, Status: wire.OutcomeRejected,
			Reason: r.Reason, Message: r.Message, ExpectedID: r.ExpectedID}}
		if r.Mutation != nil {
			o.Client, o.ID = r.Mutation.Client, r.Mutation.ID
		}
		w.settle(o)
	}
}

// settle hands an outcome to its waiters and keeps it for a while, for a
// waiter that registers after it arrived.
func (w *watcher) settle(o outcome) {
	pos := position{o.Partition, o.Offset}
	for _, wt := range w.waits[pos] {
		wt.done <- o
		if wt.last && w.answered != nil {
			w.answered(wt.client)
		}
	}
	delete(w.waits, pos)
	if _, ok := w.recent[pos]; !ok {
		w.expiry = append(w.expiry, expiring{pos, time.Now()})
	}
	w.recent[pos] = o
}

func (w *watcher) expire() {
	cut := time.Now().Add(-w.retain)
	n := 0
	for n < len(w.expiry) && w.expiry[n].at.Before(cut) {
		delete(w.recent, w.expiry[n].pos)
		n++
	}
	w.expiry = w.expiry[n:]
}

// owner returns the principal that owns a client group, if known.
func (w *watcher) owner(org, project, group string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.owners[groupKey{org, project, group}]
	return p, ok
}

// clientGroup returns the client group a client belongs to, if known.
func (w *watcher) clientGroup(org, project, client string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.clients[groupKey{org, project, client}]
	return g, ok
}

// wait waits for the outcomes of written mutations until ctx ends; those
// not decided by then have status timeout.
func (w *watcher) wait(ctx context.Context, written []wire.Written) ([]outcome, error) {
	out := make([]outcome, len(written))
	ws := make([]*waiter, len(written))
	w.mu.Lock()
	if w.stopped != nil || !w.started {
		w.mu.Unlock()
		return nil, cmp.Or(w.stopped, errors.New("not following the changelog yet"))
	}
	for i, wr := range written {
		pos := position{wr.Partition, wr.Offset}
		if o, ok := w.recent[pos]; ok {
			out[i] = o
			continue
		}
		now := time.Now()
		ws[i] = &waiter{pos: pos, since: now, done: make(chan outcome, 1), check: now.Add(w.firstCheck), interval: w.firstCheck}
		w.waits[pos] = append(w.waits[pos], ws[i])
	}
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i] != nil {
			ws[i].last, ws[i].client = true, written[i].Client
			break
		}
	}
	w.mu.Unlock()
	for i, wt := range ws {
		if wt == nil {
			continue
		}
		select {
		case o, ok := <-wt.done:
			if !ok {
				return nil, fmt.Errorf("the producer stopped following %s: %w", w.topics.versions, w.stopped)
			}
			out[i] = o
		case <-ctx.Done():
			w.forget(wt)
			out[i] = outcome{Outcome: wire.Outcome{Written: written[i], Status: wire.OutcomeTimeout}}
		}
	}
	for i := range out {
		out[i].Written = written[i] // the request's client and id, also for duplicates
	}
	return out, nil
}

func (w *watcher) forget(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.waits[wt.pos]
	for i, x := range ws {
		if x == wt {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.waits, wt.pos)
	} else {
		w.waits[wt.pos] = ws
	}
}

// checkDuplicates looks, every recheck, at the waiters that the changelog
// has not settled and that are due a check: once the sequencer group
// committed past one, its outputs are committed, and it is settled as a
// duplicate when the tail passed the end offsets of that moment.
//
// A check costs two requests to the brokers (the group's committed
// offsets, the topics' end offsets), so a waiter is due one only when
// the tail read a version of a later mutation of its partition (it was
// decided), or firstCheck after it began and then at doubling intervals
// up to maxCheck. Under load most waits last longer than a poll interval
// and are settled by their version: checking each at once made these
// requests a steady load on the brokers for no answer.
func (w *watcher) checkDuplicates(ctx context.Context) {
	t := time.NewTicker(w.recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		old := w.dueChecks(time.Now())
		w.mu.Unlock()
		if len(old) == 0 {
			continue
		}
		// Committed offsets first, then end offsets: outputs committed with
		// an input offset are below the end offsets read after it.
		committed, err := w.adm.FetchOffsets(ctx, w.group)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				continue
			}
			return
		}
		ends, err := w.adm.ListEndOffsets(ctx, w.topics.versions, w.topics.rejected)
		if err != nil {
			continue
		}
		w.mu.Lock()
		for _, wt := range old {
			c, ok := committed.Lookup(w.topics.mutations, wt.pos.partition)
			if !ok || c.Err != nil || c.At <= wt.pos.offset {
				continue
			}
			ve, ok1 := ends.Lookup(w.topics.versions, wt.pos.partition)
			re, ok2 := ends.Lookup(w.topics.rejected, wt.pos.partition%w.rparts)
			if ok1 && ok2 && ve.Err == nil && re.Err == nil {
				wt.ends = &[2]int64{ve.Offset, re.Offset}
			}
		}
		w.settleDuplicates()
		w.mu.Unlock()
	}
}

// dueChecks returns the waiters due a duplicate check at now, and sets
// when each is due the next; w.mu is held.
func (w *watcher) dueChecks(now time.Time) []*waiter {
	var due []*waiter
	for pos, ws := range w.waits {
		decided, ok := w.decided[pos.partition]
		passed := ok && pos.offset < decided
		for _, wt := range ws {
			if wt.ends == nil && (passed || !now.Before(wt.check)) {
				due = append(due, wt)
				wt.interval = min(2*wt.interval, w.maxCheck)
				wt.check = now.Add(wt.interval)
			}
		}
	}
	return due
}

// settleDuplicates settles the waiters whose outputs the tail has read
// past without finding them.
func (w *watcher) settleDuplicates() {
	for pos, ws := range w.waits {
		var keep []*waiter
		for _, wt := range ws {
			if wt.ends != nil && w.passed(w.topics.versions, pos.partition, wt.ends[0]) &&
				w.passed(w.topics.rejected, pos.partition%w.rparts, wt.ends[1]) {
				wt.done <- outcome{Outcome: wire.Outcome{Written: wire.Written{Partition: pos.partition, Offset: pos.offset}, Status: wire.OutcomeDuplicate}, next: w.versionEnd[pos.partition]}
				continue
			}
			keep = append(keep, wt)
		}
		if len(keep) == 0 {
			delete(w.waits, pos)
		} else {
			w.waits[pos] = keep
		}
	}
}

// passed reports whether the events of topic's partition are handled up
// to end; w.mu is held.
func (w *watcher) passed(topic string, partition int32, end int64) bool {
	next := w.read[topic]
	return int(partition) < len(next) && next[partition] >= 0 && next[partition] >= end
}
