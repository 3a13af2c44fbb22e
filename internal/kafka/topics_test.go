package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/testenv"
)

func newClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestEnsureTopicsCreatesThenReuses(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newClient(t, k.Brokers)
	cfg := TopicsConfig{Names: DefaultTopicNames().WithPrefix(k.Topic(t, "") + "."), Partitions: 6, ReplicationFactor: 1}

	info, err := EnsureTopics(ctx, cl, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{cfg.Names.Mutations, cfg.Names.Versions, cfg.Names.Rejected}
	if !slices.Equal(info.Created, names) || info.Partitions != 6 {
		t.Fatalf("first call: created %v with %d partitions, want %v with 6", info.Created, info.Partitions, names)
	}

	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		want := map[string]string{"retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "4194304", "cleanup.policy": "delete"}
		for _, c := range rc.Configs {
			if w, ok := want[c.Key]; ok {
				if c.Value == nil || *c.Value != w {
					t.Errorf("%s: %s = %v, want %s", rc.Name, c.Key, c.Value, w)
				}
				delete(want, c.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("%s: configs not reported: %v", rc.Name, want)
		}
	}

	// A second instance, configured with another count, keeps what exists.
	cfg.Partitions = 12
	info, err = EnsureTopics(ctx, cl, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Created) != 0 || info.Partitions != 6 {
		t.Fatalf("second call: created %v, partitions %d; want nothing created and the existing 6", info.Created, info.Partitions)
	}
}

func TestEnsureTopicsRefusesPartitionMismatch(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newClient(t, k.Brokers)
	names := DefaultTopicNames().WithPrefix(k.Topic(t, "") + ".")
	adm := kadm.NewClient(cl)
	for name, parts := range map[string]int32{names.Mutations: 12, names.Versions: 6} {
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	_, err := EnsureTopics(ctx, cl, TopicsConfig{Names: names, ReplicationFactor: 1}, nil)
	if !errors.Is(err, ErrPartitionMismatch) {
		t.Fatalf("got %v, want ErrPartitionMismatch", err)
	}
	for _, part := range []string{names.Mutations + " has 12 partitions", names.Versions + " has 6",
		"raise " + names.Versions + " to 12 partitions", "--alter --topic " + names.Versions + " --partitions 12"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
}

func TestTopicsConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  TopicsConfig
		want string
	}{
		{"defaults", TopicsConfig{}, ""},
		{"negative partitions", TopicsConfig{Partitions: -3}, "partitions is -3"},
		{"bad replication", TopicsConfig{ReplicationFactor: -2}, "replication factor is -2"},
		{"small messages", TopicsConfig{MaxMessageBytes: 1000}, "at least 1 MiB"},
		{"same names", TopicsConfig{Names: TopicNames{Mutations: "a", Versions: "a", Rejected: "b"}}, "must differ"},
		{"one in-sync replica of three", TopicsConfig{ReplicationFactor: 3, MinInsyncReplicas: 1}, "cannot keep acknowledged data"},
		{"one in-sync replica of the default", TopicsConfig{MinInsyncReplicas: 1}, "cannot keep acknowledged data"},
		{"more in-sync replicas than replicas", TopicsConfig{ReplicationFactor: 2, MinInsyncReplicas: 3}, "no write would ever be acknowledged"},
		{"one replica", TopicsConfig{ReplicationFactor: 1, MinInsyncReplicas: 1}, ""},
		{"three replicas, two in sync", TopicsConfig{ReplicationFactor: 3, MinInsyncReplicas: 2}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestEnsureTopicsRefusesUncleanElection: a topic that lets an out-of-sync
// replica become leader is refused, with why and the command that fixes it.
func TestEnsureTopicsRefusesUncleanElection(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newClient(t, k.Brokers)
	cfg := TopicsConfig{Names: DefaultTopicNames().WithPrefix(k.Topic(t, "") + "."), Partitions: 2}
	if _, err := EnsureTopics(ctx, cl, cfg, nil); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "unclean.leader.election.enable", Value: kadm.StringPtr("true")}}, cfg.Names.Versions)
	if err == nil {
		_, err = resp.On(cfg.Names.Versions, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The broker answers DescribeConfigs from its metadata cache, which
	// applies the change a moment after AlterConfigs returns: wait for it.
	for {
		_, err = EnsureTopics(ctx, cl, cfg, nil)
		if err != nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !errors.Is(err, ErrUnsafeTopic) || !strings.Contains(err.Error(), "unclean.leader.election.enable=false") {
		t.Fatalf("EnsureTopics of a topic with unclean election: %v, want ErrUnsafeTopic with the fix", err)
	}
}
