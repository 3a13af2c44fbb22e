package producer

import (
	"context"
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
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "m"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	produces := 0
	first := make(chan struct{})
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		produces++
		n := produces
		mu.Unlock()
		if n == 1 {
			close(first)
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("m"), kgo.ManualFlushing(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
	mu.Lock()
	defer mu.Unlock()
	if produces != requests {
		t.Errorf("%d pushes took %d produce requests, want %d (round limit %d records)", pushes, produces, requests, limit)
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
