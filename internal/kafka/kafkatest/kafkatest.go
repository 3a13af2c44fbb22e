// Package kafkatest gives integration tests Canon's topics of their own
// on the real broker of package testenv. It is apart from testenv, which
// package kafka's own tests use.
package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
)

// Topics creates Canon's three topics with partitions partitions under a
// prefix unique to the test, on the test process's broker, and returns
// the broker's addresses and the topics.
func Topics(t testing.TB, partitions int32) ([]string, kafka.TopicsInfo) {
	t.Helper()
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info, err := kafka.EnsureTopics(ctx, cl, kafka.TopicsConfig{
		Names: kafka.DefaultTopicNames().WithPrefix(k.Topic(t, "") + "."), Partitions: partitions, ReplicationFactor: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k.Brokers, info
}
