package changelog

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

// feedWriter is a store writer of the test's partition: it commits one
// version per transaction, as the sequencer does, and knows its store's
// offset (the offset after its last transaction's last record).
type feedWriter struct {
	c     *changelogTopics
	txn   *kgo.Client
	store int64
}

func (c *changelogTopics) writer(id string) *feedWriter {
	c.t.Helper()
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(c.names.Versions+"."+id))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(txn.Close)
	return &feedWriter{c: c, txn: txn}
}

// commit writes version n in one transaction, and returns its records as
// the feed's events and the offset of the last one.
func (w *feedWriter) commit(n uint64) ([]Event, int64) {
	t := w.c.t
	t.Helper()
	ctx := context.Background()
	v := changelogVersion(t, n, "feed")
	value, err := schemas.EncodeVersion(v, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := w.c.record(schemas.SchemaVersionV1, value)
	if err := w.txn.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := w.txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	w.store = r.Offset + 1
	return []Event{{Topic: r.Topic, Partition: 0, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Size: len(value), Version: v}}, r.Offset
}

// publish commits version n and publishes it to f as the sequencer does
// after its store write; it returns the published events.
func (w *feedWriter) publish(f *Feed, n uint64) []Event {
	from := w.store
	evs, last := w.commit(n)
	f.PublishCommitted(0, from, evs, last)
	return evs
}

// seen collects the versions a feed hands out.
type seen struct {
	mu       sync.Mutex
	versions []uint64
	changed  chan struct{}
}

func newSeen(f *Feed) *seen {
	s := &seen{changed: make(chan struct{}, 1)}
	f.Subscribe(func(evs []Event, _ Positions) {
		s.mu.Lock()
		for _, ev := range evs {
			if ev.Version != nil {
				s.versions = append(s.versions, ev.Version.Version)
			}
		}
		s.mu.Unlock()
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}, nil)
	return s
}

// waitFor waits until the feed handed out versions 1..n and checks that
// it handed each exactly once, in order.
func (s *seen) waitFor(t *testing.T, n uint64) {
	t.Helper()
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		got := slices.Clone(s.versions)
		s.mu.Unlock()
		if len(got) >= int(n) {
			if !slices.Equal(got, want) {
				t.Fatalf("the feed handed out versions %v, want %v: each once, in order", got, want)
			}
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("the feed handed out versions %v in 30 s, want 1..%d", got, n)
		}
	}
}

func (f *Feed) fetchPaused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.tail.Client().PauseFetchPartitions(nil)[f.cfg.Topics.Versions], 0)
}

func runFeed(t *testing.T, f *Feed) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("feed: %v", err)
		}
	})
	select {
	case <-f.Started():
	case err := <-done:
		t.Fatalf("feed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the feed did not start in 30 s")
	}
}

// A partition whose writer runs in the process is handed out from the
// writer's publications, with the broker's fetch of it paused; when the
// partition moves to another process's writer the feed fetches it again
// from where it is, and when it comes back it is published again: across
// both moves no version is skipped or handed out twice (real broker).
func TestFeedPartitionMovesBetweenLocalAndBroker(t *testing.T) {
	k := testenv.NewKafka(t)
	c := newChangelogTopics(t, k)
	var local atomic.Bool
	local.Store(true)
	f, err := NewFeed(FeedConfig{Kafka: kafka.ClientConfig{Brokers: c.brokers}, Topics: c.names, PartitionCount: 1,
		Local: func(int32) bool { return local.Load() }, LocalCheck: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := newSeen(f)
	runFeed(t, f)

	// Owned here: published after each commit.
	here := c.writer("here")
	var published []Event
	for n := uint64(1); n <= 3; n++ {
		published = append(published, here.publish(f, n)...)
	}
	got.waitFor(t, 3)
	if !f.fetchPaused() {
		t.Fatal("the broker still fetches a partition whose writer publishes in the process")
	}
	// A fetch that was in flight when the fetching paused brings the
	// published records again: they are not handed out twice.
	f.fetched(published)
	got.waitFor(t, 3)

	// Moved away: another process's writer commits, nothing is published
	// here; the feed fetches the partition from the broker again.
	local.Store(false)
	there := c.writer("there")
	for n := uint64(4); n <= 6; n++ {
		there.commit(n)
	}
	got.waitFor(t, 6)
	if f.fetchPaused() {
		t.Fatal("the broker does not fetch a partition no longer published in the process")
	}

	// Back here, after a restore up to the last stable offset: the
	// publications take over again.
	c.commit(7, 7, "feed") // wait for the last stable offset to pass the other writer's commits
	local.Store(true)
	here.store = c.lastStable()
	for n := uint64(8); n <= 10; n++ {
		here.publish(f, n)
	}
	got.waitFor(t, 10)
	here.publish(f, 11)
	got.waitFor(t, 11)
	if !f.fetchPaused() {
		t.Fatal("the broker still fetches the partition after its publications resumed")
	}
}

// A feed behind the writer's store (it starts at an older offset, as the
// websocket's does at the store's offsets, while the writer restored
// past it) ignores publications that do not follow what it handed out
// and reads the broker until they do: nothing is skipped.
func TestFeedBehindTheWriterReadsTheBrokerFirst(t *testing.T) {
	k := testenv.NewKafka(t)
	c := newChangelogTopics(t, k)
	w := c.writer("w")
	for n := uint64(1); n <= 5; n++ {
		w.commit(n)
	}
	// Not local until 9: a publication the feed takes pauses the
	// broker's fetch, and 8 below comes from the broker only.
	var local atomic.Bool
	f, err := NewFeed(FeedConfig{Kafka: kafka.ClientConfig{Brokers: c.brokers}, Topics: c.names, PartitionCount: 1,
		Start: map[int32]int64{0: 0}, Local: func(int32) bool { return local.Load() }, LocalCheck: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := newSeen(f)
	// Published before the feed runs, and while it is behind: ignored.
	// (7 is published while the feed reads 1-6 from the broker, or once
	// it did, when the publication follows and is handed out: 7 once,
	// either way.)
	w.publish(f, 6)
	runFeed(t, f)
	w.publish(f, 7)
	got.waitFor(t, 7)
	// A publication of records the broker delivered first: not handed
	// out twice.
	from := w.store
	evs, last := w.commit(8)
	got.waitFor(t, 8)
	f.PublishCommitted(0, from, evs, last)
	got.waitFor(t, 8)
	local.Store(true)
	w.publish(f, 9)
	got.waitFor(t, 9)
	if !f.fetchPaused() {
		t.Fatal("the broker still fetches the partition once publications follow what the feed handed out")
	}
	if _, err := NewFeed(FeedConfig{Topics: c.names, PartitionCount: 1, Start: map[int32]int64{3: 0}}); err == nil {
		t.Fatal("a start offset of a partition the topic does not have was accepted")
	}
}

// A read replica's materializer publishes what it writes to the store
// (Hooks.Wrote): the feed hands that out and does not fetch the
// partition again (real broker).
func TestFeedFedByAReplica(t *testing.T) {
	k := testenv.NewKafka(t)
	c := newChangelogTopics(t, k)
	c.commit(1, 3, "feed")
	f, err := NewFeed(FeedConfig{Kafka: kafka.ClientConfig{Brokers: c.brokers}, Topics: c.names, PartitionCount: 1,
		Start: map[int32]int64{0: 0}, Local: func(int32) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	got := newSeen(f)
	runFeed(t, f)
	m, err := NewMaterializer(MaterializerConfig{
		Tail: Config{Kafka: kafka.ClientConfig{Brokers: c.brokers}, Topics: c.names, Partitions: []int32{0}},
		Sink: openStore(t), Until: Forever, Batch: 2, Hooks: Hooks{Wrote: f.Publish},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	got.waitFor(t, 3)
	c.commit(4, 8, "feed")
	got.waitFor(t, 8)
	if !f.fetchPaused() {
		t.Fatal("the broker still fetches a partition the replica publishes")
	}
}
