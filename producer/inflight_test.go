package producer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// A push that gives up at its deadline while its records are in flight
// leaves them counted as being written (Config.Inflight, the in-process
// sequencer's hint) until the broker answers, and then as acknowledged:
// before, they were counted as written, and not acknowledged, the
// moment the push returned.
func TestInflightCountsAPushPastItsDeadline(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "rounds"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := []kgo.Opt{kgo.RecordPartitioner(partitioner())}
			if !direct {
				opts = append(opts, kgo.ManualFlushing())
			}
			b := newFakeBroker(t, true, opts...)
			cl, first, release := b.cl, b.first, b.release
			in := kafka.NewInflight(3)
			p := &Producer{cfg: Config{Inflight: in, ProduceTimeout: 200 * time.Millisecond}, cl: cl}
			if !direct {
				p.rounds = &rounds{cl: cl, limit: 1000}
			}
			ms := []*schemas.Mutation{{Org: "o", Project: "p", Client: "c", ID: 1}}
			part := schemas.Partition(schemas.ProjectKey("o", "p"), 3)

			done := make(chan error, 1)
			go func() {
				_, err := p.produce(ctx, ms, [][]byte{[]byte("x")}, time.Now())
				done <- err
			}()
			<-first
			if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a push whose produce is not answered: %v, want its deadline", err)
			}
			if writing, acked := in.Load(part); writing != 1 || acked != 0 {
				t.Fatalf("after the push gave up with its record in flight: %d being written, acknowledged up to %d; want 1 and 0", writing, acked)
			}
			close(release)
			waitFor(t, func() bool { w, a := in.Load(part); return w == 0 && a == 1 })
		})
	}
}
