package producer

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// rounds shares produce requests between concurrent pushes
// (Config.ProduceRounds). The Kafka
// client flushes by hand: one round of records is in flight at a time,
// and the records of every push that arrives meanwhile wait for it to be
// acknowledged and then go out together, in one produce request per
// broker, instead of one request per push (the idempotent producer
// allows five in flight per broker, so without this each push of a
// closed loop was a request of its own). Under load a round holds what
// arrived during one round trip to the broker; alone, a push goes out at
// once. The price is one round in flight instead of five requests.
//
// Records keep their order: a push's records are handed to the client
// in order, and a push that arrives after another goes out in the same
// round or a later one.
type rounds struct {
	cl *kgo.Client
	// limit bounds the records of a round, which the client buffers at
	// once: at most the client's MaxBufferedRecords, and at least the
	// records of any one push. A round holds at least one push, and more
	// while they fit.
	limit int

	mu sync.Mutex
	// waiting are the pushes that arrived while a round was in flight;
	// busy tells that one is.
	waiting []*roundPush
	busy    bool
}

// roundPush is one push's records, waiting for their acknowledgements.
type roundPush struct {
	ctx  context.Context
	recs []*kgo.Record
	done chan struct{} // closed once every record is acknowledged or failed

	mu  sync.Mutex
	err error // the first record's error, as ProduceSync's FirstErr
}

// produce writes recs and waits for their acknowledgements, as
// ProduceSync(ctx, recs...).FirstErr() does: a record whose ctx ends
// before it is sent fails with ctx's error, one in flight is waited for.
func (r *rounds) produce(ctx context.Context, recs []*kgo.Record) error {
	pp := &roundPush{ctx: ctx, recs: recs, done: make(chan struct{})}
	r.mu.Lock()
	if r.busy {
		r.waiting = append(r.waiting, pp)
		r.mu.Unlock()
	} else {
		r.busy = true
		r.mu.Unlock()
		go r.run([]*roundPush{pp})
	}
	<-pp.done
	return pp.err
}

// run sends rounds until no push waits.
func (r *rounds) run(round []*roundPush) {
	for {
		r.send(round)
		r.mu.Lock()
		n, records := 0, 0
		for n < len(r.waiting) && (n == 0 || records+len(r.waiting[n].recs) <= r.limit) {
			records += len(r.waiting[n].recs)
			n++
		}
		round = append(round[:0], r.waiting[:n]...)
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
func (r *rounds) send(round []*roundPush) {
	var acked sync.WaitGroup
	for _, pp := range round {
		acked.Add(len(pp.recs))
		for _, rec := range pp.recs {
			r.cl.Produce(pp.ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					pp.mu.Lock()
					if pp.err == nil {
						pp.err = err
					}
					pp.mu.Unlock()
				}
				acked.Done()
			})
		}
	}
	// Flush returns once nothing is buffered: every record of the round
	// is acknowledged or failed (a record fails once its push's context
	// ends). Its own context only bounds the wait, which the promises
	// end anyway.
	_ = r.cl.Flush(context.Background())
	acked.Wait()
	for _, pp := range round {
		close(pp.done)
	}
}
