// Package changelog reads Canon's output topics: a Tail reads
// canon.versions (and optionally canon.rejected) read_committed, without a
// consumer group, and hands decoded records to its caller in partition
// order; a Materializer brings a store up to date from canon.versions
// with it, by one decision table and an explicit offset policy.
//
// The sequencer's restore, the read replica (readapi) and the jobs'
// history read (pipelines) materialize through a Materializer; the live
// projector (projector/live) and the producer's ?wait=applied
// (producer/watch.go) subscribe to a process's one Feed, which an
// in-process store writer (the sequencer, a read replica) publishes to
// and a Tail fetches the rest of.
package changelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// Config configures a Tail.
type Config struct {
	Kafka  kafka.ClientConfig
	Topics kafka.TopicNames
	// Partitions are the partitions to follow; nil follows all
	// PartitionCount of them.
	Partitions     []int32
	PartitionCount int32
	// Start gives the first offset of canon.versions to read per
	// partition; partitions without one start at the end (only records
	// written after the tail started), or at the start with FromStart.
	Start     map[int32]int64
	FromStart bool
	// Rejected also follows canon.rejected (all RejectedPartitions of
	// it), from RejectedStart, or its end for partitions without a start.
	Rejected           bool
	RejectedPartitions int32
	RejectedStart      map[int32]int64
	// Limits bound decoded records; zero fields take schemas.DefaultLimits.
	Limits schemas.Limits
	Log    *slog.Logger
}

// Event is one record of the changelog. Exactly one of Version, Chunk,
// Deploy, Rejected and Err is set; Err is a record that does not decode, which
// the caller skips (the sequencer never writes one).
type Event struct {
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the record's Kafka timestamp.
	Timestamp int64
	// Size is the length of the record's value.
	Size    int
	Version *schemas.Version
	Chunk   *schemas.Chunk
	// Deploy is a bundle activation.
	Deploy   *schemas.Deploy
	Rejected *schemas.Rejected
	Err      error
}

// Tail follows the changelog. It is not safe for concurrent use.
type Tail struct {
	cfg Config
	cl  *kgo.Client
	// next is the next offset to read per topic and partition, control
	// records (transaction markers) included.
	next map[string]map[int32]int64
}

// New starts a tail; records are fetched from the first Poll on.
func New(cfg Config) (*Tail, error) {
	if cfg.Topics.Versions == "" {
		return nil, errors.New("changelog: no versions topic")
	}
	if cfg.Partitions == nil {
		if cfg.PartitionCount <= 0 {
			return nil, errors.New("changelog: neither Partitions nor PartitionCount set")
		}
		for p := range cfg.PartitionCount {
			cfg.Partitions = append(cfg.Partitions, p)
		}
	}
	if cfg.Log == nil {
		cfg.Log = discard
	}
	opts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	parts := map[string]map[int32]kgo.Offset{cfg.Topics.Versions: {}}
	for _, p := range cfg.Partitions {
		o := kgo.NewOffset().AtEnd()
		if cfg.FromStart {
			o = kgo.NewOffset().AtStart()
		}
		if at, ok := cfg.Start[p]; ok {
			o = kgo.NewOffset().At(at)
		}
		parts[cfg.Topics.Versions][p] = o
	}
	next := map[string]map[int32]int64{cfg.Topics.Versions: {}, cfg.Topics.Rejected: {}}
	for p, o := range cfg.Start {
		next[cfg.Topics.Versions][p] = o
	}
	if cfg.Rejected {
		if cfg.RejectedPartitions <= 0 {
			return nil, errors.New("changelog: RejectedPartitions not set")
		}
		parts[cfg.Topics.Rejected] = map[int32]kgo.Offset{}
		for p := range cfg.RejectedPartitions {
			parts[cfg.Topics.Rejected][p] = kgo.NewOffset().AtEnd()
			if at, ok := cfg.RejectedStart[p]; ok {
				parts[cfg.Topics.Rejected][p] = kgo.NewOffset().At(at)
				next[cfg.Topics.Rejected][p] = at
			}
		}
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers too, so that Next is exact: a position is
		// at a topic's end offset once its last commit marker was read.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(kafkaFetchMaxWait),
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(8<<20),
	)...)
	if err != nil {
		return nil, fmt.Errorf("changelog: kafka client: %w", err)
	}
	return &Tail{cfg: cfg, cl: cl, next: next}, nil
}

var discard = slog.New(slog.DiscardHandler)

// kafkaFetchMaxWait bounds how long a fetch waits for new records: it is
// the added latency of a live version at worst when a fetch is in flight.
const kafkaFetchMaxWait = 100 * time.Millisecond

// Close stops the tail.
func (t *Tail) Close() { t.cl.Close() }

// Client is the tail's Kafka client, for lookups such as end offsets.
func (t *Tail) Client() *kgo.Client { return t.cl }

// Next returns the next offset the tail will read of a partition of the
// versions or rejected topic, transaction markers included; ok is false
// before the tail read anything of it.
func (t *Tail) Next(topic string, partition int32) (offset int64, ok bool) {
	offset, ok = t.next[topic][partition]
	return offset, ok
}

// Poll waits for the next records and returns them decoded, in offset
// order per partition. It returns ctx's error when ctx ends, once no
// fetched record is left.
func (t *Tail) Poll(ctx context.Context) ([]Event, error) {
	for {
		fs := t.cl.PollFetches(ctx)
		// Records a fetch holds are the client's position already: they
		// are returned even when ctx ended meanwhile, never dropped.
		if err := ctx.Err(); err != nil && fs.NumRecords() == 0 {
			return nil, err
		}
		if fs.IsClientClosed() {
			return nil, kgo.ErrClientClosed
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				t.cfg.Log.Warn("changelog fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		var evs []Event
		fs.EachRecord(func(r *kgo.Record) {
			t.next[r.Topic][r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				evs = append(evs, t.decode(r))
			}
		})
		if len(evs) > 0 || fs.NumRecords() > 0 {
			return evs, nil // only markers: the positions moved
		}
	}
}

func (t *Tail) decode(r *kgo.Record) Event {
	ev := Event{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Size: len(r.Value)}
	var schema, hash string
	for _, h := range r.Headers {
		switch h.Key {
		case schemas.HeaderSchema:
			schema = string(h.Value)
		case schemas.HeaderChunkHash:
			hash = string(h.Value)
		}
	}
	if r.Topic == t.cfg.Topics.Rejected {
		ev.Rejected, ev.Err = schemas.DecodeRejected(schema, r.Value, t.cfg.Limits)
		return ev
	}
	var cr schemas.ChangelogRecord
	cr, ev.Err = schemas.DecodeChangelog(schema, hash, r.Key, r.Value, t.cfg.Limits)
	ev.Chunk, ev.Version, ev.Deploy = cr.Chunk, cr.Version, cr.Deploy
	return ev
}
