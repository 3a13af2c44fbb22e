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
// broker; alone, a push goes out at once. The price is one round in
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

	mu sync.Mutex
	// waiting are the pushes that arrived while a round was in flight;
	// busy tells that one is.
	waiting []*roundPush
	busy    bool
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
	if err := ctx.Err(); err != nil {
		return err
	}
	pp := &roundPush{ctx: ctx, recs: recs, arrived: time.Now(), done: make(chan struct{})}
	r.mu.Lock()
	if r.busy {
		r.waiting = append(r.waiting, pp)
		r.mu.Unlock()
	} else {
		r.busy = true
		pp.taken = true
		r.mu.Unlock()
		go r.run([]*roundPush{pp})
	}
	select {
	case <-pp.done:
		return pp.result()
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
		return ctx.Err()
	}
	r.mu.Unlock()
	return pp.acked(ctx)
}

// acked returns the push's error once its records are acknowledged or
// failed, or, when ctx ends first, an error saying they may still be
// written. A direct push (produceDirect) waits through it too.
func (pp *roundPush) acked(ctx context.Context) error {
	select {
	case <-pp.done:
	case <-ctx.Done():
		select {
		case <-pp.done:
		default:
			return fmt.Errorf("no acknowledgement before the push's deadline (its records may still be written): %w", ctx.Err())
		}
	}
	return pp.result()
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

// run sends rounds until no push waits.
func (r *rounds) run(round []*roundPush) {
	for {
		r.send(round)
		r.mu.Lock()
		round = round[:0]
		n, records := 0, 0
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
		if len(round) == 0 {
			r.busy = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
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
