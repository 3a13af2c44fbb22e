package readapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// ReplicaConfig configures a Replica.
type ReplicaConfig struct {
	// Kafka connects to the cluster; its ClientID names the replica's
	// client (one per process: metrics are registered by client id).
	Kafka  kafka.ClientConfig
	Topics kafka.TopicNames
	// Store is materialized for Partitions. Required; its partition
	// count is canon.versions'.
	Store *store.Store
	// Partitions are the partitions of canon.versions to follow; nil
	// means all of them.
	Partitions []int32
	// Rejections also follows canon.rejected (Topics.Rejected) and records
	// the rejections of the replica's partitions in the store, so that
	// the mutation status says why one was rejected (store.Rejection).
	Rejections bool
	// Limits bound decoded records; zero fields take schemas.DefaultLimits.
	Limits schemas.Limits
	// Checkpoints, when set, restores a partition the store holds
	// nothing of (or much less than a checkpoint) from the newest usable
	// checkpoint before following the changelog after it.
	Checkpoints changelog.Checkpoints
	// Changelog, when set, is the process's changelog feed: the replica
	// publishes to it what it writes to the store, so that the feed does
	// not fetch those partitions again (see Replica.Publishes).
	Changelog *changelog.Feed
	Log       *slog.Logger
}

// Replica materializes a store for some partitions of canon.versions
// with a changelog.Materializer that follows the changelog forever, by
// the decision table the sequencer's restore uses: it resumes from the
// stored offsets after a restart, and a store that the changelog cannot
// explain (it is ahead of the topic, or a version conflicts with what it
// holds: the topic was recreated) has the partition dropped and rebuilt
// from the start of the topic. It is ready once it has caught up with the
// last stable offsets it saw at start.
type Replica struct {
	cfg ReplicaConfig

	mu sync.Mutex
	// target is, per partition, the offset the replica must reach to be
	// ready (the last stable offset at start); caught are those that have.
	target map[int32]int64
	caught map[int32]bool
	// at is where each partition is applied up to, for Ready's lags.
	at map[int32]int64
	// started is closed once the targets are known.
	started chan struct{}
	skipped atomic.Int64
	// lags measures the copies against the changelog as it is now, once
	// caught up (Lags).
	lags *changelog.LagWatch
}

// Skipped is the number of changelog records skipped because no
// sequencer wrote them.
func (r *Replica) Skipped() int64 { return r.skipped.Load() }

// NewReplica returns a replica; Run follows the changelog.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	if cfg.Store == nil {
		return nil, errors.New("readapi: replica: Store is required")
	}
	if cfg.Topics.Versions == "" {
		return nil, errors.New("readapi: replica: Topics.Versions is required")
	}
	if cfg.Partitions == nil {
		for p := range cfg.Store.Partitions() {
			cfg.Partitions = append(cfg.Partitions, p)
		}
	}
	for _, p := range cfg.Partitions {
		if p < 0 || p >= cfg.Store.Partitions() {
			return nil, fmt.Errorf("readapi: replica: partition %d is not one of the %d of %s", p, cfg.Store.Partitions(), cfg.Topics.Versions)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &Replica{cfg: cfg, started: make(chan struct{})}
	r.lags = &changelog.LagWatch{Kafka: cfg.Kafka, Topic: cfg.Topics.Versions, Log: cfg.Log, Offset: cfg.Store.Offset,
		Partitions: func() []int32 { return cfg.Partitions }}
	return r, nil
}

// Lags returns how many changelog offsets each partition's copy has
// left: while catching up at start, to the last stable offset seen then;
// after, to the last stable offset measured every few seconds. -1 is not
// known yet.
func (r *Replica) Lags() map[int32]int64 {
	measured := r.lags.Lags()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int32]int64, len(r.cfg.Partitions))
	for _, p := range r.cfg.Partitions {
		switch n, ok := measured[p]; {
		case r.target == nil:
			out[p] = -1
		case !r.caught[p]:
			out[p] = max(0, r.target[p]-r.at[p])
		case ok:
			out[p] = n
		default:
			out[p] = 0
		}
	}
	return out
}

// Ready reports whether every partition has caught up with the last
// stable offset seen at start.
func (r *Replica) Ready(context.Context) error {
	select {
	case <-r.started:
	default:
		return errors.New("the read replica has not read the changelog's offsets yet")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var behind []string
	for _, p := range r.cfg.Partitions {
		if !r.caught[p] {
			behind = append(behind, fmt.Sprintf("%d (%d records left)", p, max(0, r.target[p]-r.at[p])))
		}
	}
	if len(behind) > 0 {
		return fmt.Errorf("the read replica is catching up on partitions %s of %s", strings.Join(behind, ", "), r.cfg.Topics.Versions)
	}
	return nil
}

// Run follows the changelog until ctx ends.
func (r *Replica) Run(ctx context.Context) error {
	tcfg := changelog.Config{
		Kafka: r.cfg.Kafka, Topics: r.cfg.Topics, Partitions: r.cfg.Partitions,
		PartitionCount: r.cfg.Store.Partitions(), Limits: r.cfg.Limits, Log: r.cfg.Log,
	}
	if r.cfg.Rejections {
		var err error
		if tcfg.RejectedPartitions, err = r.rejectedPartitions(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	m, err := changelog.NewMaterializer(changelog.MaterializerConfig{
		Tail: tcfg, Sink: r.cfg.Store, Until: changelog.Forever, Rejections: r.cfg.Rejections,
		Checkpoints: r.cfg.Checkpoints,
		Hooks: changelog.Hooks{
			Started: r.startedAt,
			Applied: func(p int32, next int64, _ int, _ int64) { r.reached(p, next) },
			Skipped: func(int32, int64, error) { r.skipped.Add(1) },
			Wrote:   r.wrote(),
		},
	})
	if err != nil {
		return err
	}
	defer m.Close()
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.lags.Run(lctx) })
	defer wg.Wait()
	defer stop()
	err = m.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// rejectedPartitions reads the partition count of canon.rejected.
func (r *Replica) rejectedPartitions(ctx context.Context) (int32, error) {
	cl, err := r.cfg.Kafka.Aux("counts").NewClient()
	if err != nil {
		return 0, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	counts, err := kafka.ReadPartitionCounts(ctx, cl, r.cfg.Topics)
	if err != nil {
		return 0, fmt.Errorf("read the partition count of %s: %w", r.cfg.Topics.Rejected, err)
	}
	return counts.Rejected, nil
}

// startedAt notes where each partition is read from and the last stable
// offsets it must reach to be ready.
func (r *Replica) startedAt(from, target map[int32]int64) {
	r.mu.Lock()
	r.target, r.caught, r.at = target, map[int32]bool{}, maps.Clone(from)
	for p, t := range target {
		if from[p] >= t {
			r.caught[p] = true
		}
	}
	r.mu.Unlock()
	select {
	case <-r.started:
	default:
		close(r.started)
	}
	r.cfg.Log.Info("read replica following the changelog", "topic", r.cfg.Topics.Versions, "partitions", r.cfg.Partitions, "targets", target)
}

// reached notes that partition p is applied up to next.
func (r *Replica) reached(p int32, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at != nil {
		r.at[p] = next
	}
	if !r.caught[p] && next >= r.target[p] {
		r.caught[p] = true
		if len(r.caught) == len(r.target) {
			r.cfg.Log.Info("read replica caught up", "partitions", r.cfg.Partitions)
		}
	}
}

// wrote is the materializer's Wrote hook: the feed's Publish.
func (r *Replica) wrote() func(int32, int64, []changelog.Event, int64) {
	if r.cfg.Changelog == nil {
		return nil
	}
	return r.cfg.Changelog.Publish
}

// Publishes reports whether the replica publishes partition p to
// Config.Changelog: the feed's FeedConfig.Local.
func (r *Replica) Publishes(p int32) bool {
	select {
	case <-r.started:
	default:
		return false
	}
	return r.cfg.Changelog != nil && slices.Contains(r.cfg.Partitions, p)
}

// Partitions are the partitions the replica follows.
func (r *Replica) Partitions() []int32 { return slices.Clone(r.cfg.Partitions) }
