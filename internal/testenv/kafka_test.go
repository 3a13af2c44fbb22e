package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/schemas"
)

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func createTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// consumeAll reads topic from the start until it has seen want records or
// ctx ends, with the given isolation level.
func consumeAll(t *testing.T, ctx context.Context, brokers []string, topic string, isolation kgo.IsolationLevel, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(isolation), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll %s: %v", topic, err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// The sequencer relies on Kafka transactions: records of an aborted
// transaction must never reach a read_committed consumer, those of a
// committed one must.
func TestKafkaTransactionsAbortInvisibleCommitVisible(t *testing.T) {
	k := NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := k.Topic(t, "txn")
	createTopic(t, ctx, newAdmin(t, k.Brokers), topic, 3)

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID("txn-"+randSuffix()),
		kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	produceTxn := func(prefix string, n int, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", prefix, err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("end transaction %s: %v", prefix, err)
		}
	}
	produceTxn("aborted", 10, kgo.TryAbort)
	produceTxn("committed", 10, kgo.TryCommit)

	// read_uncommitted sees all 20 data records, which proves the aborted
	// ones were really written before being hidden.
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	all := consumeAll(t, rctx, k.Brokers, topic, kgo.ReadUncommitted(), 20)
	rcancel()
	if len(all) != 20 {
		t.Fatalf("read_uncommitted saw %d records, want 20", len(all))
	}

	rctx, rcancel = context.WithTimeout(ctx, 30*time.Second)
	got := consumeAll(t, rctx, k.Brokers, topic, kgo.ReadCommitted(), 10)
	rcancel()
	// Give an aborted record that would wrongly follow a chance to arrive.
	rctx, rcancel = context.WithTimeout(ctx, 2*time.Second)
	got = append(got, consumeAll(t, rctx, k.Brokers, topic, kgo.ReadCommitted(), 11)[len(got):]...)
	rcancel()
	var values []string
	for _, r := range got {
		values = append(values, string(r.Value))
	}
	slices.Sort(values)
	want := make([]string, 10)
	for i := range want {
		want[i] = fmt.Sprintf("committed-%d", i)
	}
	slices.Sort(want)
	if !slices.Equal(values, want) {
		t.Fatalf("read_committed saw %q, want %q", values, want)
	}
}

// The sequencer's group gives each partition one owner; partitions move
// when a member leaves.
func TestKafkaConsumerGroupSplitsAndRebalances(t *testing.T) {
	k := NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := k.Topic(t, "group")
	const partitions = 6
	createTopic(t, ctx, newAdmin(t, k.Brokers), topic, partitions)
	group := "group-" + randSuffix()

	type member struct{ cl *kgo.Client }
	newMember := func() *member {
		m := &member{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		)
		if err != nil {
			t.Fatal(err)
		}
		m.cl = cl
		go func() {
			for {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() || ctx.Err() != nil {
					return
				}
			}
		}()
		return m
	}
	owned := func(m *member) []int32 {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		dg, err := kadm.NewClient(m.cl).DescribeGroups(ctx, group)
		if err != nil {
			return nil
		}
		memberID, _ := m.cl.GroupMetadata()
		for _, mem := range dg[group].Members {
			if mem.MemberID != memberID {
				continue
			}
			if ca, ok := mem.Assigned.AsConsumer(); ok {
				for _, t := range ca.Topics {
					return slices.Sorted(slices.Values(t.Partitions))
				}
			}
		}
		return nil
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	a, b := newMember(), newMember()
	var pa, pb []int32
	waitUntil("two members to split 6 partitions", func() bool {
		pa, pb = owned(a), owned(b)
		return len(pa) == partitions/2 && len(pb) == partitions/2
	})
	union := slices.Sorted(slices.Values(append(slices.Clone(pa), pb...)))
	if !slices.Equal(union, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("members own %v and %v, want a split of 0..5", pa, pb)
	}

	b.cl.Close() // leaves the group
	waitUntil("the remaining member to own all partitions", func() bool {
		return slices.Equal(owned(a), []int32{0, 1, 2, 3, 4, 5})
	})
	a.cl.Close()
}

// Canon computes a project's partition itself (schemas.Partition); a
// producer using franz-go's default partitioner must land on the same one,
// which is the partition Java's default partitioner picks.
func TestKafkaKeyedRecordLandsOnJavaPartition(t *testing.T) {
	k := NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := k.Topic(t, "keyed")
	const partitions = 12
	createTopic(t, ctx, newAdmin(t, k.Brokers), topic, partitions)

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// "foobar" and "21" are Kafka's published murmur2 vectors.
	keys := []string{"21", "foobar", "abc", "acme/roadmap", "org-1/project-42"}
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("org-%d/project-%d", i%7, i))
	}
	for _, key := range keys {
		r := &kgo.Record{Key: []byte(key), Value: []byte("v")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if want := schemas.Partition(r.Key, partitions); r.Partition != want {
			t.Errorf("key %q: producer put it on partition %d, Java's partitioner picks %d", key, r.Partition, want)
		}
	}
	// Read back: the broker holds each record on that partition.
	got := consumeAll(t, ctx, k.Brokers, topic, kgo.ReadUncommitted(), len(keys))
	if len(got) != len(keys) {
		t.Fatalf("read %d records, want %d", len(got), len(keys))
	}
	for _, r := range got {
		if want := schemas.Partition(r.Key, partitions); r.Partition != want {
			t.Errorf("key %q stored on partition %d, want %d", r.Key, r.Partition, want)
		}
	}
}

// A dedicated broker can be killed and restarted with its data, which the
// failure tests of later components rely on.
func TestKafkaKillAndRestartKeepsData(t *testing.T) {
	requireIntegration(t)
	// A dedicated broker, even when a shared one is given: that one must not
	// be killed under the other tests.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv, err := StartKafka(ctx, KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Logf("dedicated %s broker started in %v", srv.Provider(), srv.StartTime())
	topic := "restart." + randSuffix()
	createTopic(t, ctx, newAdmin(t, srv.Brokers()), topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.Brokers()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	srv.Kill()
	if err := pingKafka(ctx, srv.Brokers()); err == nil {
		t.Fatal("broker still answers after Kill")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, ctx, srv.Brokers(), topic, kgo.ReadUncommitted(), 1)
	if len(got) != 1 || string(got[0].Value) != "before" {
		t.Fatalf("after restart read %d records, want the one written before the kill", len(got))
	}
}

// A cluster id that starts with '-' is taken for an option by
// kafka-storage, so the local broker could not be formatted about one
// start in 64. 2,000 ids miss a leading '-' by chance with probability
// (63/64)^2000, about 2e-14.
func TestKafkaClusterIDNeverLooksLikeAnOption(t *testing.T) {
	for range 2000 {
		id := kafkaClusterID()
		if len(id) != 22 || id[0] == '-' {
			t.Fatalf("cluster id %q: want 22 characters, not starting with '-'", id)
		}
	}
}
