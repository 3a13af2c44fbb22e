package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The pushes that arrive while a round is in flight go out together, in
// one produce request, once it is acknowledged, as many as fit the
// round's limit; each gets its own offsets, in its order.
func TestRoundsShareProduceRequests(t *testing.T) {
	// 8 pushes of 3 records; 7 arrive while the first is in flight.
	for _, tc := range []struct{ limit, requests int }{
		{1000, 2}, // the first, then the 7 others together
		{6, 5},    // the first, then 2, 2, 2 and 1
		{1, 8},    // one push per round, whatever its size
	} {
		t.Run(fmt.Sprintf("limit %d", tc.limit), func(t *testing.T) { testRounds(t, tc.limit, tc.requests) })
	}
}

func testRounds(t *testing.T, limit, requests int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newFakeBroker(t, true, kgo.ManualFlushing())
	cl, first, release := b.cl, b.first, b.release
	r := &rounds{cl: cl, limit: limit}

	const pushes, each = 8, 3
	recs := make([][]*kgo.Record, pushes)
	errs := make([]error, pushes)
	var wg sync.WaitGroup
	push := func(i int) {
		defer wg.Done()
		for j := range each {
			recs[i] = append(recs[i], &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, "%d-%d", i, j)})
		}
		errs[i] = r.produce(ctx, recs[i])
	}
	wg.Add(1)
	go push(0)
	<-first
	wg.Add(pushes - 1)
	for i := 1; i < pushes; i++ {
		go push(i)
	}
	for {
		r.mu.Lock()
		n := len(r.waiting)
		r.mu.Unlock()
		if n == pushes-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		for j := 1; j < each; j++ {
			if a, b := recs[i][j-1], recs[i][j]; b.Partition != a.Partition || b.Offset != a.Offset+1 {
				t.Errorf("push %d: record %d at %d/%d after %d/%d: not next in order", i, j, b.Partition, b.Offset, a.Partition, a.Offset)
			}
		}
	}
	produces := b.produces()
	// A round may take a request or two more than its pushes need: the
	// client's drain loop of the previous round can still be running
	// when the next round's records are handed to it, and sends those
	// that are there (franz-go checks ManualFlushing only when a drain
	// starts). Fewer requests than the rounds need would mean a round
	// over its limit.
	if produces < requests || produces > requests+2 {
		t.Errorf("%d pushes took %d produce requests, want %d to %d (round limit %d records)", pushes, produces, requests, requests+2, limit)
	}
}

// A record that fails fails its push, and only its push.
func TestRoundsReportEachPushesError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "m"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("m"), kgo.ManualFlushing())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &rounds{cl: cl, limit: 1000}
	gone, stop := context.WithCancel(ctx)
	stop()
	if err := r.produce(gone, []*kgo.Record{{Value: []byte("late")}}); err == nil {
		t.Fatal("a push whose context ended was written")
	}
	ok := &kgo.Record{Value: []byte("kept")}
	if err := r.produce(ctx, []*kgo.Record{ok}); err != nil {
		t.Fatalf("the next push: %v", err)
	}
	if ok.Offset != 0 {
		t.Fatalf("the next push is at offset %d, want 0: the failed one wrote nothing", ok.Offset)
	}
}

// fakeBroker is a kfake broker with topic "m" of 3 partitions and a
// client of it that partitions by hand (and takes opts), counting the
// client's produce requests. A held broker answers the first produce
// request only once release is closed, and closes first when it
// arrives: a round in flight that the broker does not answer.
type fakeBroker struct {
	cl             *kgo.Client
	first, release chan struct{}

	mu sync.Mutex
	n  int
}

func newFakeBroker(t *testing.T, hold bool, opts ...kgo.Opt) *fakeBroker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "m"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b := &fakeBroker{first: make(chan struct{}), release: make(chan struct{})}
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		b.mu.Lock()
		b.n++
		n := b.n
		b.mu.Unlock()
		if hold && n == 1 {
			close(b.first)
			c.SleepControl(func() { <-b.release })
		}
		return nil, nil, false
	})
	b.cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("m"),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.cl.Close)
	return b
}

// produces is the number of produce requests the broker got so far.
func (b *fakeBroker) produces() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// A push waiting behind a round the broker does not answer gets its
// context's error when its context ends, not when the round ends, and
// leaves the queue unwritten; so does the push of the round itself.
// Before, both waited for the round however long it took: the loaded
// run's pushes of up to 11 s.
func TestRoundsPushesLeaveAtTheirDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newFakeBroker(t, true, kgo.ManualFlushing())
	cl, first, release := b.cl, b.first, b.release
	r := &rounds{cl: cl, limit: 1000}

	held := make(chan error, 1)
	heldCtx, heldCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer heldCancel()
	go func() { held <- r.produce(heldCtx, []*kgo.Record{{Partition: 0, Value: []byte("held")}}) }()
	<-first

	const timeout = 200 * time.Millisecond
	waitCtx, waitCancel := context.WithTimeout(ctx, timeout)
	defer waitCancel()
	start := time.Now()
	err := r.produce(waitCtx, []*kgo.Record{{Partition: 1, Value: []byte("waits")}})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting push whose context ended: %v, want its deadline", err)
	}
	if took > timeout+time.Second {
		t.Fatalf("a waiting push with a %v deadline returned after %v", timeout, took)
	}
	r.mu.Lock()
	left := len(r.waiting)
	r.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d pushes still queued after the waiting one left", left)
	}
	select {
	case err := <-held:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the push of the unanswered round: %v, want its deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the push of an unanswered round is still waiting 5s after its deadline")
	}

	// Once the broker answers, the next push goes out; the one that
	// left was never written, the held one was.
	close(release)
	rec := &kgo.Record{Partition: 1, Value: []byte("next")}
	if err := r.produce(ctx, []*kgo.Record{rec}); err != nil {
		t.Fatalf("the push after the slow round: %v", err)
	}
	if rec.Offset != 0 {
		t.Fatalf("the next push on partition 1 is at offset %d, want 0: the push that left was written", rec.Offset)
	}
}

// Pushes sharing a round, and so a batch, do not fail each other: a
// push whose context was canceled while it waited is dropped from the
// round, and the others of the same partition are written.
func TestRoundsCanceledPushFailsOnlyItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newFakeBroker(t, true, kgo.ManualFlushing())
	cl, first, release := b.cl, b.first, b.release
	r := &rounds{cl: cl, limit: 1000}
	heldDone := make(chan error, 1)
	go func() { heldDone <- r.produce(ctx, []*kgo.Record{{Partition: 2, Value: []byte("held")}}) }()
	<-first

	gone, stop := context.WithCancel(ctx)
	const pushes = 6
	errs := make([]error, pushes)
	recs := make([]*kgo.Record, pushes)
	var wg sync.WaitGroup
	for i := range pushes {
		pctx := ctx
		if i == 0 {
			pctx = gone // first in the queue: its records would open the batch
		}
		recs[i] = &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "%d", i)}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.produce(pctx, recs[i:i+1]) }()
		for {
			r.mu.Lock()
			n := len(r.waiting)
			r.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	stop()
	close(release)
	wg.Wait()
	if err := <-heldDone; err != nil {
		t.Fatalf("the held push: %v", err)
	}
	if !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("the canceled push: %v, want context.Canceled", errs[0])
	}
	for i := 1; i < pushes; i++ {
		if errs[i] != nil {
			t.Fatalf("push %d failed with the canceled push's round: %v", i, errs[i])
		}
		if want := int64(i - 1); recs[i].Offset != want {
			t.Errorf("push %d at offset %d, want %d", i, recs[i].Offset, want)
		}
	}
}

// Without rounds too, a push whose request the broker does not answer
// gets its context's error at its deadline (ProduceSync waited for
// franz-go's request timeout and retry).
func TestDirectPushLeavesAtItsDeadline(t *testing.T) {
	b := newFakeBroker(t, true)
	cl, first, release := b.cl, b.first, b.release
	defer close(release)
	const timeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := produceDirect(ctx, cl, []*kgo.Record{{Partition: 0, Value: []byte("held")}}, nil)
	took := time.Since(start)
	<-first
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a push whose request is not answered: %v, want its deadline", err)
	}
	if took > timeout+time.Second {
		t.Fatalf("a push with a %v deadline returned after %v", timeout, took)
	}
}

// Pushes answered together (?wait=applied) are followed by their
// clients' next pushes: the first of those waits for the others of the
// clients answered, and all go in one produce request, not the first
// alone and the others in a second round. The gather is long here, so a
// test that passes quickly saw it end by the pushes, not by its bound.
func TestRoundsGatherAnsweredPushes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newFakeBroker(t, false, kgo.ManualFlushing())
	cl, produces := b.cl, b.produces
	r := &rounds{cl: cl, limit: 1000, gather: 20 * time.Second, window: 20 * time.Second}

	const pushes = 8
	for i := range pushes {
		r.answered(fmt.Sprintf("client-%d", i))
	}
	start := time.Now()
	errs := make([]error, pushes)
	var wg sync.WaitGroup
	for i := range pushes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.produceSettled(ctx, []*kgo.Record{{Partition: int32(i % 3), Value: fmt.Appendf(nil, "%d", i)}}, fmt.Sprintf("client-%d", i), nil)
		}()
		if i == 0 {
			// The first opens the round and gathers.
			waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.arrived != nil })
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the pushes took %v: the round waited for its bound, not for the answered clients' pushes", took)
	}
	if n := produces(); n != 1 {
		t.Fatalf("%d pushes after %d answers took %d produce requests, want 1", pushes, pushes, n)
	}
}

// Only the next push of an answered client, within gatherWindow of the
// answers, opens a gathering round: a push of no known client, of a
// client that was not answered, or after the window (a client that
// paces its pushes) goes out at once; and a gathering round is released
// by the answered clients' pushes, not by others'.
func TestRoundsGatherOnlyRightAfterAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newFakeBroker(t, false, kgo.ManualFlushing()).cl
	// A window of 200ms, long enough for this test's steps on a busy
	// machine.
	r := &rounds{cl: cl, limit: 1000, gather: 20 * time.Second, window: 200 * time.Millisecond}
	check := func(what, client string) {
		t.Helper()
		start := time.Now()
		if err := r.produceSettled(ctx, []*kgo.Record{{Partition: 0, Value: []byte(what)}}, client, nil); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("%s took %v: it waited for pushes that were not coming", what, took)
		}
	}
	check("a push without answers before it", "a")
	r.answered("a")
	r.answered("b")
	check("a push of a client that was not answered", "c")
	check("a push without a client", "")
	time.Sleep(2 * r.window)
	check("a push after answers older than the window", "a")

	// The round of the last push ends after answering it: wait for it,
	// so that a's push opens the next round.
	waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return !r.busy })
	r.mu.Lock()
	r.window = 20 * time.Second
	r.mu.Unlock()
	r.answered("a")
	r.answered("b")
	done := make(chan error, 1)
	go func() { done <- r.produceSettled(ctx, []*kgo.Record{{Partition: 1, Value: []byte("first")}}, "a", nil) }()
	waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.arrived != nil })
	// Another client's push queues behind the gathering round without
	// releasing it; b's releases both.
	other := make(chan error, 1)
	go func() {
		other <- r.produceSettled(ctx, []*kgo.Record{{Partition: 2, Value: []byte("other")}}, "c", nil)
	}()
	waitFor(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.waiting) == 1 })
	r.mu.Lock()
	gathering := r.arrived != nil
	r.mu.Unlock()
	if !gathering {
		t.Fatal("a push of a client that was not answered released the gathering round")
	}
	check("the push of the other answered client", "b")
	for _, c := range []chan error{done, other} {
		if err := <-c; err != nil {
			t.Fatalf("a push of the gathered round: %v", err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
