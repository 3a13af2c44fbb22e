// Package kafka holds the Kafka plumbing shared by Canon's components: the
// administration of Canon's topics, common client options and the embedded
// Kafka-protocol broker that `canon dev` runs.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canon-sync/canon/schemas"
)

// Defaults of TopicsConfig.
const (
	DefaultPartitions        = 12
	DefaultMaxMessageBytes   = 4 << 20
	DefaultReplicationFactor = 3
	DefaultMinInsyncReplicas = 2
)

// ErrPartitionMismatch is returned by EnsureTopics when canon.mutations and
// canon.versions have different partition counts.
var ErrPartitionMismatch = errors.New("partition counts of the mutations and versions topics differ")

// TopicNames are the names of Canon's topics. Tests use unique names to
// share one broker; deployments keep the defaults.
type TopicNames struct {
	Mutations string
	Versions  string
	Rejected  string
}

// DefaultTopicNames returns the names from schemas.
func DefaultTopicNames() TopicNames {
	return TopicNames{Mutations: schemas.TopicMutations, Versions: schemas.TopicVersions, Rejected: schemas.TopicRejected}
}

// WithPrefix returns the names with prefix prepended, e.g. "test42." gives
// "test42.canon.mutations".
func (n TopicNames) WithPrefix(prefix string) TopicNames {
	return TopicNames{Mutations: prefix + n.Mutations, Versions: prefix + n.Versions, Rejected: prefix + n.Rejected}
}

// TopicsConfig configures how Canon's topics are created.
type TopicsConfig struct {
	// Names of the topics; zero fields take DefaultTopicNames.
	Names TopicNames

	// Partitions of canon.mutations and canon.versions (canon.rejected gets
	// the same count). Default 12. It only applies to topics that do not
	// exist yet: Canon never changes the partition count of an existing
	// topic, because that would move projects to other partitions while
	// sequencers hold their state.
	Partitions int32

	// ReplicationFactor of new topics; -1 (the default) is 3, or the
	// number of brokers when the cluster has fewer.
	ReplicationFactor int16

	// MinInsyncReplicas is the min.insync.replicas of new replicated
	// topics: how many replicas hold a record before the (acks=all)
	// write is acknowledged. Default 2; it must be at least 2 when the
	// replication factor is above 1, or an acknowledged record could
	// live on one replica only and be lost with it.
	MinInsyncReplicas int

	// MaxMessageBytes is the topics' max.message.bytes: the largest record
	// batch the broker accepts. Default 4 MiB, above the largest mutation
	// record Canon's limits allow. Producers must not send larger batches.
	MaxMessageBytes int32
}

func (c *TopicsConfig) setDefaults() {
	def := DefaultTopicNames()
	if c.Names.Mutations == "" {
		c.Names.Mutations = def.Mutations
	}
	if c.Names.Versions == "" {
		c.Names.Versions = def.Versions
	}
	if c.Names.Rejected == "" {
		c.Names.Rejected = def.Rejected
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Validate reports a configuration that cannot work, saying what to change.
func (c TopicsConfig) Validate() error {
	c.setDefaults()
	if c.Partitions < 1 {
		return fmt.Errorf("partitions is %d: it must be at least 1", c.Partitions)
	}
	if c.ReplicationFactor < -1 || c.ReplicationFactor == 0 {
		return fmt.Errorf("replication factor is %d: use -1 for 3 (or the number of brokers when fewer) or a count of at least 1", c.ReplicationFactor)
	}
	if c.MinInsyncReplicas < 0 || c.MinInsyncReplicas == 1 && c.ReplicationFactor != 1 {
		return fmt.Errorf("min.insync.replicas %d cannot keep acknowledged data: a record acknowledged by one replica is lost with it; use at least 2 (or 0 for the default, 2)", c.MinInsyncReplicas)
	}
	if c.ReplicationFactor > 0 && c.MinInsyncReplicas > int(c.ReplicationFactor) {
		return fmt.Errorf("min.insync.replicas %d is above the replication factor %d: no write would ever be acknowledged", c.MinInsyncReplicas, c.ReplicationFactor)
	}
	if c.MaxMessageBytes < 1<<20 {
		return fmt.Errorf("max message bytes is %d: it must be at least 1 MiB (1048576) to hold Canon's largest records", c.MaxMessageBytes)
	}
	n := c.Names
	if n.Mutations == n.Versions || n.Mutations == n.Rejected || n.Versions == n.Rejected {
		return fmt.Errorf("topic names must differ, got mutations=%q versions=%q rejected=%q", n.Mutations, n.Versions, n.Rejected)
	}
	return nil
}

// topicConfigs are the configs Canon sets on its topics: the logs are
// kept forever (replays and restores read them from the start), and a
// replicated topic acknowledges a write once two replicas hold it and
// never elects a leader that may miss acknowledged records.
func (c TopicsConfig) topicConfigs(rf int16) map[string]*string {
	cfgs := map[string]*string{
		"cleanup.policy":    kadm.StringPtr("delete"),
		"retention.ms":      kadm.StringPtr("-1"),
		"retention.bytes":   kadm.StringPtr("-1"),
		"max.message.bytes": kadm.StringPtr(strconv.Itoa(int(c.MaxMessageBytes))),
	}
	if rf > 1 {
		minISR := c.MinInsyncReplicas
		if minISR == 0 {
			minISR = min(DefaultMinInsyncReplicas, int(rf))
		}
		cfgs["min.insync.replicas"] = kadm.StringPtr(strconv.Itoa(minISR))
		cfgs["unclean.leader.election.enable"] = kadm.StringPtr("false")
	}
	return cfgs
}

// replicationFactor is the replication factor of new topics: the
// configured one, or 3, or the number of brokers when the cluster has
// fewer (a development broker).
func (c TopicsConfig) replicationFactor(ctx context.Context, adm *kadm.Client) (int16, error) {
	if c.ReplicationFactor > 0 {
		return c.ReplicationFactor, nil
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("count the brokers: %w", err)
	}
	return int16(max(1, min(DefaultReplicationFactor, len(md.Brokers)))), nil
}

// TopicsInfo describes Canon's topics after EnsureTopics.
type TopicsInfo struct {
	Names      TopicNames
	Partitions int32    // of canon.mutations and canon.versions
	Created    []string // topics created by this call
}

// EnsureTopics creates whichever of Canon's topics are missing and checks
// the ones that exist: canon.mutations and canon.versions must have the
// same partition count (ErrPartitionMismatch otherwise). Existing topics
// whose retention is finite are reported with a warning on log, since
// Canon needs their whole history.
func EnsureTopics(ctx context.Context, cl *kgo.Client, cfg TopicsConfig, log *slog.Logger) (TopicsInfo, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return TopicsInfo{}, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := []string{cfg.Names.Mutations, cfg.Names.Versions, cfg.Names.Rejected}
	info := TopicsInfo{Names: cfg.Names}

	adm := kadm.NewClient(cl)
	rf, err := cfg.replicationFactor(ctx, adm)
	if err != nil {
		return info, err
	}
	for _, name := range names {
		resp, err := adm.CreateTopic(ctx, cfg.Partitions, rf, cfg.topicConfigs(rf), name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			continue
		case errors.Is(err, kerr.InvalidReplicationFactor):
			return info, fmt.Errorf("create topic %s with replication factor %d: %w: the cluster has fewer brokers; pass a lower --replication-factor", name, rf, err)
		case err != nil:
			return info, fmt.Errorf("create topic %s with %d partitions: %w", name, cfg.Partitions, err)
		}
		info.Created = append(info.Created, name)
		log.Info("created topic", "topic", name, "partitions", cfg.Partitions, "replication_factor", rf)
	}

	// Read back what the broker has, including topics created by a racing
	// instance with another partition count. Metadata of a new topic takes a
	// moment to reach every broker, so a missing one is asked for again.
	counts, err := ReadPartitionCounts(ctx, cl, cfg.Names)
	if err != nil {
		return info, err
	}
	info.Partitions = counts.Mutations
	if info.Partitions != cfg.Partitions {
		log.Warn("topics exist with another partition count than configured; using theirs",
			"topic", cfg.Names.Mutations, "partitions", info.Partitions, "configured", cfg.Partitions)
	}
	if err := checkTopicConfigs(ctx, adm, names, log); err != nil {
		return info, err
	}
	return info, nil
}

// PartitionCounts are the partition counts of Canon's topics.
type PartitionCounts struct {
	// Mutations is also the count of canon.versions: ReadPartitionCounts
	// refuses topics where they differ.
	Mutations int32
	Rejected  int32
}

// ReadPartitionCounts reads the partition counts of Canon's topics, waiting
// until the metadata of all three is available or ctx ends, and refuses
// (ErrPartitionMismatch) a canon.versions whose count differs from
// canon.mutations'.
func ReadPartitionCounts(ctx context.Context, cl *kgo.Client, names TopicNames) (PartitionCounts, error) {
	counts, err := partitionCounts(ctx, cl, []string{names.Mutations, names.Versions, names.Rejected})
	if err != nil {
		return PartitionCounts{}, err
	}
	if err := checkPartitionCounts(names, counts); err != nil {
		return PartitionCounts{}, err
	}
	return PartitionCounts{Mutations: counts[names.Mutations], Rejected: counts[names.Rejected]}, nil
}

// partitionCounts returns the partition count of each topic, waiting until
// the metadata of all of them is available or ctx ends.
//
// The request bypasses the client's metadata cache, which may still hold
// "unknown topic" from before the topics were created.
func partitionCounts(ctx context.Context, cl *kgo.Client, names []string) (map[string]int32, error) {
	for {
		req := kmsg.NewPtrMetadataRequest()
		for _, name := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("read metadata of %v: %w", names, err)
		}
		counts := make(map[string]int32, len(names))
		var missing error
		for _, name := range names {
			missing = fmt.Errorf("topic %s is not in the metadata", name)
			for _, t := range resp.Topics {
				if t.Topic == nil || *t.Topic != name {
					continue
				}
				if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
					missing = fmt.Errorf("topic %s: %w", name, err)
				} else {
					missing = nil
					counts[name] = int32(len(t.Partitions))
				}
			}
			if missing != nil {
				break
			}
		}
		if missing == nil {
			return counts, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waited for the metadata of new topics: %w)", missing, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkPartitionCounts refuses mismatched partition counts with the fix.
func checkPartitionCounts(n TopicNames, counts map[string]int32) error {
	m, v := counts[n.Mutations], counts[n.Versions]
	if m == v {
		return nil
	}
	larger := max(m, v)
	smaller := n.Versions
	if v > m {
		smaller = n.Mutations
	}
	return fmt.Errorf("%w: %s has %d partitions and %s has %d; a project's versions live in the partition "+
		"of the same number as its mutations, so they must be equal. Stop every sequencer, then raise %s to %d partitions "+
		"(kafka-topics.sh --bootstrap-server BROKER --alter --topic %s --partitions %d), or recreate both topics empty",
		ErrPartitionMismatch, n.Mutations, m, n.Versions, v, smaller, larger, smaller, larger)
}

// ErrUnsafeTopic is returned by EnsureTopics for a topic whose settings
// cannot keep acknowledged records.
var ErrUnsafeTopic = errors.New("topic settings can lose acknowledged records")

// checkTopicConfigs refuses topics that can lose acknowledged records (a
// replicated topic with min.insync.replicas below 2, or with unclean
// leader election), and warns about finite retention: Canon reads its
// topics from the start to restore and replay.
func checkTopicConfigs(ctx context.Context, adm *kadm.Client, names []string, log *slog.Logger) error {
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		log.Warn("cannot check the topics' configs", "err", err)
		return nil
	}
	replicas := map[string]int{}
	if md, err := adm.Metadata(ctx, names...); err == nil {
		for _, td := range md.Topics {
			for _, pd := range td.Partitions {
				replicas[td.Topic] = max(replicas[td.Topic], len(pd.Replicas))
			}
		}
	}
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case "retention.ms", "retention.bytes":
				if *c.Value != "-1" {
					log.Warn("topic retention is finite: Canon reads its topics from the start to restore and replay, "+
						"so old records must be kept; set it to -1",
						"topic", rc.Name, c.Key, *c.Value)
				}
			case "unclean.leader.election.enable":
				if *c.Value == "true" {
					errs = append(errs, fmt.Errorf("%w: %s has unclean.leader.election.enable=true, which lets a replica that missed acknowledged records become leader and drop them; set it to false (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config unclean.leader.election.enable=false)",
						ErrUnsafeTopic, rc.Name, rc.Name))
				}
			case "min.insync.replicas":
				if n, err := strconv.Atoi(*c.Value); err == nil && n < 2 && replicas[rc.Name] > 1 {
					errs = append(errs, fmt.Errorf("%w: %s has %d replicas but min.insync.replicas=%d, so a record acknowledged by one replica is lost with it; set it to 2 (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=2)",
						ErrUnsafeTopic, rc.Name, replicas[rc.Name], n, rc.Name))
				}
			}
		}
	}
	return errors.Join(errs...)
}
