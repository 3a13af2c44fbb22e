package canontest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

// Topics creates Canon's three topics with partitions partitions under a
// prefix unique to the test, on brokers, or on the test process's real
// broker (package testenv) when brokers is nil. It returns the brokers,
// the prefix (what `canon serve --topic-prefix` takes) and the topics.
func Topics(tb testing.TB, brokers []string, partitions int32) ([]string, string, kafka.TopicsInfo) {
	tb.Helper()
	if brokers == nil {
		brokers = testenv.NewKafka(tb).Brokers
	}
	prefix := topicPrefix(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	// The default replication factor: 1 on a single broker, 3 on a
	// cluster (testenv.StartKafkaCluster).
	info, err := kafka.EnsureTopics(ctx, cl, kafka.TopicsConfig{
		Names: kafka.DefaultTopicNames().WithPrefix(prefix), Partitions: partitions}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return brokers, prefix, info
}

// topicPrefix is the test's name, made safe for a topic name and cut
// short, and a random suffix: "TestX_sub.1a2b3c4d.".
func topicPrefix(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "." + hex.EncodeToString(b[:]) + "."
}

// MutationRecord is how the ingest produces a mutation to topic: keyed
// by the project, with the schema header, on the project's partition of
// partitions (for a client with a manual partitioner; others ignore it).
func MutationRecord(tb testing.TB, topic string, partitions int32, m *schemas.Mutation) *kgo.Record {
	tb.Helper()
	v, err := schemas.EncodeMutation(m, schemas.DefaultLimits())
	if err != nil {
		tb.Fatal(err)
	}
	key := schemas.ProjectKey(m.Org, m.Project)
	return &kgo.Record{Topic: topic, Key: key, Value: v, Partition: schemas.Partition(key, partitions),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}}
}

// Header is the value of a record's header key, "" if it has none.
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// ReadTopic reads a whole topic, read_committed, up to its last stable
// offsets as they are when it is called, without the control records.
func ReadTopic(tb testing.TB, brokers []string, topic string) []*kgo.Record {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			tb.Fatalf("read %s: %v (still to read: %v)", topic, err, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}
