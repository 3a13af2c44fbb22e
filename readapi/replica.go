package readapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
	Log    *slog.Logger
}

// Replica materializes a store for some partitions of canon.versions,
// with the same store.Apply as the sequencer: it reads the changelog
// read_committed, transaction markers included, so that the offset it
// stores with each batch is exact, and resumes from the stored offsets
// after a restart. It is ready once it has caught up with the last stable
// offsets it saw at start.
//
// A store that the changelog cannot explain (it is ahead of the topic, or
// a version conflicts with what it holds: the topic was recreated) has
// the partition dropped and rebuilt from the start of the topic, as the
// sequencer's restore does.
type Replica struct {
	cfg ReplicaConfig

	mu sync.Mutex
	// target is, per partition, the offset the replica must reach to be
	// ready (the last stable offset at start); caught are those that have.
	target map[int32]int64
	caught map[int32]bool
	// started is closed once the targets are known.
	started chan struct{}
	// fromStart marks the partitions whose store holds nothing but what
	// this replica applied from the changelog's first record: a record
	// the store refuses there was not written by a sequencer.
	fromStart map[int32]bool
	skipped   atomic.Int64
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
	return &Replica{cfg: cfg, started: make(chan struct{}), fromStart: map[int32]bool{}}, nil
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
	var behind []int32
	for _, p := range r.cfg.Partitions {
		if !r.caught[p] {
			behind = append(behind, p)
		}
	}
	if len(behind) > 0 {
		return fmt.Errorf("the read replica is catching up on partitions %v of %s", behind, r.cfg.Topics.Versions)
	}
	return nil
}

// errRebuild: a partition was dropped to be rebuilt; following starts over.
var errRebuild = errors.New("partition dropped for a rebuild")

// Run follows the changelog until ctx ends.
func (r *Replica) Run(ctx context.Context) error {
	for {
		err := r.follow(ctx)
		if errors.Is(err, errRebuild) {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

// follow tails the changelog from the stored offsets and applies it.
func (r *Replica) follow(ctx context.Context) error {
	st, topic := r.cfg.Store, r.cfg.Topics.Versions
	start := map[int32]int64{}
	for _, p := range r.cfg.Partitions {
		o, ok, err := st.Offset(p)
		if err != nil {
			return err
		}
		if ok {
			start[p] = o
		}
	}
	tcfg := changelog.Config{
		Kafka: r.cfg.Kafka, Topics: r.cfg.Topics, Partitions: r.cfg.Partitions,
		PartitionCount: st.Partitions(), Start: start, FromStart: true, Limits: r.cfg.Limits, Log: r.cfg.Log,
	}
	rejected := map[int32]int64{} // the recorded offset per partition of canon.rejected
	if r.cfg.Rejections {
		var err error
		if tcfg.RejectedPartitions, err = r.rejectedPartitions(ctx); err != nil {
			return err
		}
		for rp := range tcfg.RejectedPartitions {
			if rejected[rp], _, err = st.RejectedOffset(rp); err != nil {
				return err
			}
		}
		tcfg.Rejected, tcfg.RejectedStart = true, maps.Clone(rejected)
	}
	tail, err := changelog.New(tcfg)
	if err != nil {
		return err
	}
	defer tail.Close()
	if err := r.checkOffsets(ctx, tail, start); err != nil {
		return err
	}

	for _, p := range r.cfg.Partitions {
		if _, ok := start[p]; !ok {
			r.fromStart[p] = true
		}
	}

	applied := start // the stored offset per partition
	for {
		evs, err := tail.Poll(ctx)
		if err != nil {
			return err
		}
		recs, offsets := map[int32][]store.Record{}, map[int32][]int64{}
		rejs := map[int32][]*schemas.Rejected{}
		for _, ev := range evs {
			if ev.Topic == r.cfg.Topics.Rejected && r.cfg.Rejections {
				// Records that do not decode name no mutation to ask for.
				if m := ev.Rejected; m != nil && m.Mutation != nil && slices.Contains(r.cfg.Partitions, st.PartitionOf(m.Mutation.Org, m.Mutation.Project)) {
					rejs[ev.Partition] = append(rejs[ev.Partition], ev.Rejected)
				}
				continue
			}
			if ev.Topic != topic {
				continue
			}
			if ev.Err != nil {
				if errors.Is(ev.Err, schemas.ErrNewerSchema) {
					return fmt.Errorf("changelog record %s[%d]@%d: %w", topic, ev.Partition, ev.Offset, ev.Err)
				}
				r.skipForeign(ev.Partition, ev.Offset, ev.Err)
				continue
			}
			if ev.Chunk != nil || ev.Version != nil {
				recs[ev.Partition] = append(recs[ev.Partition], store.Record{Chunk: ev.Chunk, Version: ev.Version})
				offsets[ev.Partition] = append(offsets[ev.Partition], ev.Offset)
			}
		}
		for _, p := range r.cfg.Partitions {
			next, ok := tail.Next(topic, p)
			if o, had := applied[p]; !ok || (had && next <= o) {
				continue
			}
			var err error
			if r.fromStart[p] {
				err = st.ApplySkipping(p, recs[p], offsets[p], next, func(offset int64, err error) { r.skipForeign(p, offset, err) })
			} else {
				err = st.Apply(p, recs[p], next)
			}
			if err != nil {
				if store.Refused(err) {
					r.cfg.Log.Warn("the changelog does not explain the replica's store: dropping the partition and rebuilding it",
						"partition", p, "err", err)
					if derr := st.DropPartition(p); derr != nil {
						return derr
					}
					return errRebuild
				}
				return err
			}
			applied[p] = next
			r.reached(p, next)
		}
		for rp, at := range rejected {
			if next, ok := tail.Next(r.cfg.Topics.Rejected, rp); ok && next > at {
				if err := st.RecordRejections(rejs[rp], rp, next); err != nil {
					return err
				}
				rejected[rp] = next
			}
		}
	}
}

// rejectedPartitions reads the partition count of canon.rejected.
func (r *Replica) rejectedPartitions(ctx context.Context) (int32, error) {
	opts, err := r.cfg.Kafka.Aux("counts").Opts()
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(opts...)
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

// skipForeign reports a changelog record that no sequencer wrote.
func (r *Replica) skipForeign(p int32, offset int64, err error) {
	r.skipped.Add(1)
	r.cfg.Log.Error("skipping a record of the changelog that no sequencer wrote: it does not decode or does not follow the versions before it; find out who produces to the topic",
		"topic", r.cfg.Topics.Versions, "partition", p, "offset", offset, "err", err)
}

// checkOffsets reads the changelog's start and last stable offsets: the
// last stable ones are the replica's readiness targets; a stored offset
// beyond them means the topic was recreated (the partition is rebuilt),
// one before the start that records the store needs were deleted.
func (r *Replica) checkOffsets(ctx context.Context, tail *changelog.Tail, stored map[int32]int64) error {
	topic := r.cfg.Topics.Versions
	adm := kadm.NewClient(tail.Client())
	var starts, ends kadm.ListedOffsets
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if starts, err = adm.ListStartOffsets(lctx, topic); err == nil {
			ends, err = adm.ListCommittedOffsets(lctx, topic) // last stable offsets
		}
		cancel()
		if err == nil {
			break
		}
		r.cfg.Log.Warn("list the offsets of the changelog; retrying", "topic", topic, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	target := map[int32]int64{}
	for _, p := range r.cfg.Partitions {
		so, ok := starts.Lookup(topic, p)
		eo, ok2 := ends.Lookup(topic, p)
		if !ok || !ok2 || so.Err != nil || eo.Err != nil {
			return fmt.Errorf("offsets of %s[%d] unavailable: %w", topic, p, errors.Join(so.Err, eo.Err))
		}
		o, has := stored[p]
		switch {
		case has && o > eo.Offset:
			r.cfg.Log.Warn("the replica's store is ahead of the changelog (topic recreated?): dropping the partition and rebuilding it",
				"partition", p, "stored_offset", o, "changelog_end", eo.Offset)
			if err := r.cfg.Store.DropPartition(p); err != nil {
				return err
			}
			return errRebuild
		case o < so.Offset && (has || so.Offset > 0):
			return fmt.Errorf("%s[%d] starts at offset %d but the replica's store needs it from %d: records were deleted (retention must be infinite: set retention.ms=-1)",
				topic, p, so.Offset, o)
		}
		target[p] = eo.Offset
	}
	r.mu.Lock()
	r.target, r.caught = target, map[int32]bool{}
	for p, t := range target {
		if o := stored[p]; o >= t {
			r.caught[p] = true
		}
	}
	r.mu.Unlock()
	select {
	case <-r.started:
	default:
		close(r.started)
	}
	r.cfg.Log.Info("read replica following the changelog", "topic", topic, "partitions", r.cfg.Partitions, "targets", target)
	return nil
}

// reached notes that partition p is applied up to next.
func (r *Replica) reached(p int32, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.caught[p] && next >= r.target[p] {
		r.caught[p] = true
		if len(r.caught) == len(r.target) {
			r.cfg.Log.Info("read replica caught up", "partitions", r.cfg.Partitions)
		}
	}
}

// Partitions are the partitions the replica follows.
func (r *Replica) Partitions() []int32 { return slices.Clone(r.cfg.Partitions) }
