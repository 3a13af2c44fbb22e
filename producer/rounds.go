package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// rounds shares produce requests between concurrent pushes, the default
// (unless Config.ProduceDirect). The Kafka client flushes by hand: one round of
// records is in flight at a time, and the records of every push that
// arrives meanwhile wait for it to be acknowledged and then go out
// together, in one produce request per broker, instead of one request
// per push (the idempotent producer allows five in flight per broker, so
// without this each push of a closed loop was a request of its own).
// Under load a round holds what arrived during one round trip to the
// broker; alone, a push goes out at once, unless it follows answers to
// waiting pushes, whose clients' next pushes it waits for briefly (see
// answered). The price is one round in
// flight instead of five requests.
//
// Records keep their order: a push's records are handed to the client
// in order, and a push that arrives after another goes out in the same
// round or a later one.
//
// Every wait is bounded by the push's context (Producer.produce gives it
// Config.ProduceTimeout): a push waiting for its round leaves the queue
// when its context ends, unwritten; a push whose round is in flight stops
// waiting and gets the context's error, and its records may still be
// written (the client retries the push; written mutations are skipped as
// duplicates). A slow round, e.g. one whose request's outcome is unknown
// because the broker went away, which the idempotent producer must retry
// until it is answered, holds the pushes behind it, of every partition,
// until their contexts end: they are answered 503 with Retry-After, as a
// push of the direct mode is when its own partition is slow
// (docs/performance.md measures the choice).
type rounds struct {
	cl *kgo.Client
	// limit bounds the records of a round, which the client buffers at
	// once: at most the client's MaxBufferedRecords, and at least the
	// records of any one push. A round holds at least one push, and more
	// while they fit.
	limit int
	// m receives the rounds' sizes and waits; nil in some tests.
	m *metrics

	// gather bounds how long a round that opens right after pushes were
	// answered waits for their clients' next pushes (see answered); 0
	// never waits.
	gather time.Duration
	// window is how long after answers their clients' next pushes are
	// expected; 0 is gatherWindow.
	window time.Duration

	mu sync.Mutex
	// waiting are the pushes that arrived while a round was in flight
	// or gathering; busy tells that one is.
	waiting []*roundPush
	busy    bool
	// expected are the clients whose pushes waited for their outcomes
	// and were answered, the last at answeredAt, and that have not
	// pushed again since; arrived is closed when the last of them
	// pushed while a round gathers.
	expected   map[string]struct{}
	answeredAt time.Time
	arrived    chan struct{}
}

// gatherWindow is how long after pushes were answered their clients'
// next pushes are expected: a closed-loop client pushes again at once
// (well under a millisecond on one machine); one that paces its pushes
// comes later, and no round waits for it.
const gatherWindow = 2 * time.Millisecond

// DefaultRoundGather is the default of Config.RoundGather.
const DefaultRoundGather = time.Millisecond

// answered tells the rounds that a push of client which waited for its
// outcomes (?wait=applied) is being answered: the watcher calls it when
// it hands the push its outcomes, before the answer is written. The
// pushes of one transaction are answered together, and closed-loop
// clients (one push in flight each, the edits workload) push again at
// once: without a gather, the first of those pushes opens a round alone
// and the others, a fraction of a millisecond behind it, wait for its
// round trip and go in a second round, so the sequencer's next
// transaction waits for two round trips and fetches twice. A round
// opened by the next push of an answered client, within gatherWindow of
// the answers, waits, at most Config.RoundGather, until the other
// answered clients pushed too. A client that paces its pushes, or a
// push of a client that was not answered, opens no gathering round.
func (r *rounds) answered(client string) {
	if r.gather <= 0 || client == "" {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.expected == nil || now.Sub(r.answeredAt) > r.windowLen() {
		r.expected = map[string]struct{}{}
	}
	r.expected[client] = struct{}{}
	r.answeredAt = now
	r.mu.Unlock()
}

func (r *rounds) windowLen() time.Duration {
	if r.window > 0 {
		return r.window
	}
	return gatherWindow
}

// followsLocked reports whether a push of client arriving now is the
// next push of an answered client, which it then no longer expects;
// r.mu is held.
func (r *rounds) followsLocked(now time.Time, client string) bool {
	if client == "" || len(r.expected) == 0 {
		return false
	}
	if now.Sub(r.answeredAt) > r.windowLen() {
		clear(r.expected)
		return false
	}
	if _, ok := r.expected[client]; !ok {
		return false
	}
	delete(r.expected, client)
	return true
}

// roundPush is one push's records, waiting for their acknowledgements.
type roundPush struct {
	ctx     context.Context
	recs    []*kgo.Record
	arrived time.Time
	done    chan struct{} // closed once every record is acknowledged or failed, or the push left unsent
	taken   bool          // in a round (under rounds.mu)

	mu  sync.Mutex
	err error // the first record's error, as ProduceSync's FirstErr
}

// produce writes recs and waits for their acknowledgements, or until ctx
// ends, whichever is first. A push whose ctx ends before its round is
// sent writes nothing and gets ctx's error; one whose round is in flight
// gets an error wrapping ctx's, and its records may still be written.
func (r *rounds) produce(ctx context.Context, recs []*kgo.Record) error {
	return r.produceSettled(ctx, recs, "", nil)
}

// produceSettled is produce for a push of client ("" when unknown) that
// also calls settled, when not nil, once the push's records are
// acknowledged or failed, or it left unsent, with the push's result:
// before it returns, or later when it stopped waiting at its deadline
// while its records were in flight.
func (r *rounds) produceSettled(ctx context.Context, recs []*kgo.Record, client string, settled func(error)) error {
	if err := ctx.Err(); err != nil {
		if settled != nil {
			settled(err)
		}
		return err
	}
	now := time.Now()
	pp := &roundPush{ctx: ctx, recs: recs, arrived: now, done: make(chan struct{})}
	r.mu.Lock()
	follows := r.followsLocked(now, client)
	more := follows && len(r.expected) > 0
	if r.busy {
		r.waiting = append(r.waiting, pp)
		if r.arrived != nil && len(r.expected) == 0 {
			// The gathering round has what it waited for, or the
			// answers are too old to expect more.
			close(r.arrived)
			r.arrived = nil
		}
		r.mu.Unlock()
	} else {
		r.busy = true
		pp.taken = true
		var gather chan struct{}
		if more {
			gather = make(chan struct{})
			r.arrived = gather
		}
		r.mu.Unlock()
		go r.run([]*roundPush{pp}, gather)
	}
	select {
	case <-pp.done:
		return pp.settle(settled)
	case <-ctx.Done():
	}
	r.mu.Lock()
	if !pp.taken {
		// Still waiting for a round (or dropped from one unsent):
		// leave the queue; nothing of this push is written.
		if i := slices.Index(r.waiting, pp); i >= 0 {
			r.waiting = slices.Delete(r.waiting, i, i+1)
		}
		r.mu.Unlock()
		if settled != nil {
			settled(ctx.Err())
		}
		return ctx.Err()
	}
	r.mu.Unlock()
	return pp.acked(ctx, settled)
}

// acked returns the push's error once its records are acknowledged or
// failed, or, when ctx ends first, an error saying they may still be
// written. A direct push (produceDirect) waits through it too. settled,
// when not nil, gets the push's result once its records are
// acknowledged or failed, later if ctx ended first.
func (pp *roundPush) acked(ctx context.Context, settled func(error)) error {
	select {
	case <-pp.done:
	case <-ctx.Done():
		select {
		case <-pp.done:
		default:
			if settled != nil {
				go func() {
					<-pp.done
					settled(pp.result())
				}()
			}
			return fmt.Errorf("no acknowledgement before the push's deadline (its records may still be written): %w", ctx.Err())
		}
	}
	return pp.settle(settled)
}

// settle returns the result of a push that is done, given to settled
// first when not nil.
func (pp *roundPush) settle(settled func(error)) error {
	err := pp.result()
	if settled != nil {
		settled(err)
	}
	return err
}

// fail keeps err as the push's error if it is its first record's to fail.
func (pp *roundPush) fail(err error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.err == nil {
		pp.err = err
	}
}

func (pp *roundPush) result() error {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.err
}

// run sends rounds until no push waits. The first round holds round
// and, when gather is not nil, first waits until it is closed (the
// expected pushes arrived) or r.gather passed, and takes the pushes that
// arrived meanwhile.
func (r *rounds) run(round []*roundPush, gather chan struct{}) {
	if gather != nil {
		t := time.NewTimer(r.gather)
		select {
		case <-gather:
		case <-t.C:
		}
		t.Stop()
		r.mu.Lock()
		if r.arrived == gather {
			r.arrived = nil
		}
		round = r.takeLocked(round)
		r.mu.Unlock()
	}
	for {
		r.send(round)
		r.mu.Lock()
		round = r.takeLocked(round[:0])
		if len(round) == 0 {
			r.busy = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// takeLocked appends to round the waiting pushes that fit, in order,
// dropping those whose context ended; r.mu is held.
func (r *rounds) takeLocked(round []*roundPush) []*roundPush {
	n, records := 0, 0
	for _, pp := range round {
		records += len(pp.recs)
	}
	for n < len(r.waiting) {
		pp := r.waiting[n]
		if pp.ctx.Err() != nil {
			// Its produce returns ctx's error; it is not
			// sent.
			n++
			continue
		}
		if len(round) > 0 && records+len(pp.recs) > r.limit {
			break
		}
		pp.taken = true
		round = append(round, pp)
		records += len(pp.recs)
		n++
	}
	r.waiting = append(r.waiting[:0], r.waiting[n:]...)
	return round
}

// send buffers the records of a round, flushes them and waits for every
// acknowledgement.
//
// The records are produced with one context for the round, which ends
// at the latest deadline of its pushes: with each push's own context, a
// push whose context ended would fail the records of other pushes that
// share its batch (franz-go fails a batch by its first record's context)
// and cancel the request that carries them.
func (r *rounds) send(round []*roundPush) {
	start := time.Now()
	var deadline time.Time
	records, unbounded := 0, false
	for _, pp := range round {
		records += len(pp.recs)
		d, ok := pp.ctx.Deadline()
		unbounded = unbounded || !ok
		if d.After(deadline) {
			deadline = d
		}
	}
	if unbounded {
		deadline = time.Time{}
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	if r.m != nil {
		r.m.roundRecords.Observe(float64(records))
		for _, pp := range round {
			r.m.roundWait.Observe(start.Sub(pp.arrived).Seconds())
		}
	}
	var acked sync.WaitGroup
	for _, pp := range round {
		acked.Add(len(pp.recs))
		for _, rec := range pp.recs {
			r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					pp.fail(err)
				}
				acked.Done()
			})
		}
	}
	// Flush returns once nothing is buffered: every record of the round
	// is acknowledged or failed (a record not yet sent fails once the
	// round's context ends; one whose request's outcome is unknown is
	// retried until it is answered). Its own context only bounds the
	// wait, which the promises end anyway.
	_ = r.cl.Flush(context.Background())
	acked.Wait()
	for _, pp := range round {
		close(pp.done)
	}
}
