// Package producer is Canon's ingest: the HTTP push endpoints (Canon's own
// and Replicache's push v1) that authenticate a request, validate every
// mutation against the record schemas and limits, stamp the principal and
// the receive time, and write the mutations to canon.mutations, keyed by
// project, answering only once Kafka has acknowledged them. Nothing is
// written for a request that is refused.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes   = 4 << 20
	DefaultMaxBatch       = 1000
	DefaultRate           = 1000 // mutations per second per principal
	DefaultBurst          = 5000
	DefaultProduceTimeout = 10 * time.Second
	DefaultWait           = 10 * time.Second
	DefaultMaxWait        = 30 * time.Second
	// DefaultRoundRecords bounds the records of pushes that share a
	// produce round (more when MaxBatch is larger).
	DefaultRoundRecords    = 5000
	defaultMaxReplicacheID = 128
)

// DefaultMaxReplicacheBodyBytes bounds a Replicache push: 8 pushes' worth
// of an offline backlog, of which one push's prefix is kept.
const DefaultMaxReplicacheBodyBytes = 32 << 20

// Config configures a Producer.
type Config struct {
	// Kafka holds the brokers, client id, logger and metrics registerer.
	Kafka kafka.ClientConfig
	// Topics are Canon's topic names; only Mutations is written.
	Topics kafka.TopicNames
	// Keys verify the requests' tokens. Required.
	Keys *auth.Keyset
	// Limits bound every mutation; default schemas.DefaultLimits().
	Limits schemas.Limits
	// MaxBodyBytes bounds a request body; default 4 MiB. Larger bodies get
	// 413 before they are read.
	MaxBodyBytes int64
	// MaxBatch bounds the mutations of one request; default 1000.
	MaxBatch int
	// MaxReplicacheBodyBytes bounds the body of a Replicache push, which
	// holds all of a client's pending mutations and so may be over
	// MaxBodyBytes and MaxBatch: the longest prefix within those is taken,
	// the rest is read and dropped for the next push to carry. The body is
	// read as it arrives; what is kept is the prefix and the mutation being
	// read. Default 32 MiB; never less than MaxBodyBytes.
	MaxReplicacheBodyBytes int64
	// Rate and Burst limit each principal's mutations per second; a
	// request over it gets 429 with Retry-After. Default 1000/s, burst 5000.
	Rate  float64
	Burst int
	// ProduceDirect has every push produce its records at once, a
	// request of its own while fewer than five are in flight to the
	// broker. By default concurrent pushes share produce requests
	// instead: one round of records is in flight at a time, and what
	// arrives meanwhile goes out together once it is acknowledged
	// (rounds.go), which costs less CPU per edit, broker included, and
	// carries more edits per second (docs/performance.md).
	ProduceDirect bool
	// Linger is the producer linger; default none: a batch is sent at
	// once. A linger of a few milliseconds trades push latency for fewer,
	// larger produce requests. It applies to ProduceDirect only.
	Linger time.Duration
	// RoundGather bounds how long a round of records that opens right
	// after pushes waiting for their outcomes were answered waits for
	// their clients' next pushes, so that closed-loop clients answered
	// together share one round (rounds.go); default 1ms, negative never
	// waits. It applies to rounds only (not ProduceDirect).
	RoundGather time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgement; default 10s.
	ProduceTimeout time.Duration
	// Log receives the producer's logs; nil discards them.
	Log *slog.Logger
	// Registerer gets the producer's metrics; nil disables them.
	Registerer prometheus.Registerer
	// Now is the clock for tokens and receive times; nil is time.Now.
	Now func() time.Time
	// Partitions is the partition count of Canon's topics. When set, the
	// producer follows canon.versions and canon.rejected: pushes may wait
	// for their outcomes (?wait=applied) and a push into a client group
	// that another principal owns is refused with 409. When 0 it does
	// neither (the sequencer still rejects such mutations).
	Partitions int32
	// Changelog is the process's changelog feed, which the caller runs
	// and which follows Partitions partitions: the producer subscribes to
	// it rather than fetching the changelog again. Nil: with Partitions
	// set, the producer runs a feed of its own.
	Changelog *changelog.Feed
	// SequencerGroup is the sequencer's consumer group, whose committed
	// offsets tell a duplicate; default sequencer's "canon-sequencer".
	SequencerGroup string
	// MaxWait bounds ?wait=applied (and its ?timeout=); default 30s.
	MaxWait time.Duration
	// Readable, when set, tells when the read API of the node that answers
	// pushes can serve what canon.versions holds below offset next of a
	// partition: it returns then (at once for a partition the node does
	// not serve reads of), or with ctx's error. ?wait=applied answers an
	// outcome only once it returned, so that a read on the same node right
	// after the answer sees the write (the node's store applies a version
	// just after Kafka committed it). Nil answers as soon as the changelog
	// has the outcome.
	Readable func(ctx context.Context, partition int32, next int64) error
	// CheckBundle compiles a mutator bundle and returns its mutators'
	// names, or why it cannot run (model/bundle's Compile): a deploy that
	// fails it is refused with 400 invalid_bundle before anything is
	// written. Nil refuses every deploy with 501.
	CheckBundle func(src []byte) (names []string, err error)
	// Inflight, when set, counts the pushes' records per partition while
	// they are written and where Kafka's acknowledgements end, for a
	// sequencer in the same process (sequencer.Config.Inflight). Its
	// partition count must be that of canon.mutations; nil counts
	// nothing.
	Inflight *kafka.Inflight
}

func (c *Config) setDefaults() {
	if c.Topics == (kafka.TopicNames{}) {
		c.Topics = kafka.DefaultTopicNames()
	}
	if c.Limits == (schemas.Limits{}) {
		c.Limits = schemas.DefaultLimits()
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxReplicacheBodyBytes == 0 {
		c.MaxReplicacheBodyBytes = max(DefaultMaxReplicacheBodyBytes, c.MaxBodyBytes)
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = DefaultProduceTimeout
	}
	if c.RoundGather == 0 {
		c.RoundGather = DefaultRoundGather
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SequencerGroup == "" {
		c.SequencerGroup = "canon-sequencer"
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Keys == nil {
		errs = append(errs, errors.New("producer: Keys is required: a keyset to verify tokens"))
	}
	if c.MaxBodyBytes < 1<<10 || c.MaxBatch < 1 || c.Burst < 1 || c.Rate <= 0 {
		errs = append(errs, fmt.Errorf("producer: limits must be positive (body %d, batch %d, rate %v, burst %d)", c.MaxBodyBytes, c.MaxBatch, c.Rate, c.Burst))
	}
	if c.MaxReplicacheBodyBytes < c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("producer: MaxReplicacheBodyBytes %d is below MaxBodyBytes %d: use 0 for the default (%d) or at least MaxBodyBytes",
			c.MaxReplicacheBodyBytes, c.MaxBodyBytes, DefaultMaxReplicacheBodyBytes))
	}
	if c.Linger < 0 || c.Linger > time.Second {
		errs = append(errs, fmt.Errorf("producer: linger %v: use 0 (none, the default) to 1s", c.Linger))
	}
	if c.RoundGather > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("producer: round gather %v: use at most 100ms, or a negative value to never wait (default %v)", c.RoundGather, DefaultRoundGather))
	}
	if c.Linger != 0 && !c.ProduceDirect {
		errs = append(errs, fmt.Errorf("producer: linger %v does not apply to produce rounds (the default): set ProduceDirect (--producer-rounds=false), or use 0", c.Linger))
	}
	if n := c.Inflight.Partitions(); c.Inflight != nil && c.Partitions > 0 && n != c.Partitions {
		errs = append(errs, fmt.Errorf("producer: Inflight counts %d partitions but Partitions is %d: make it with kafka.NewInflight(%d)", n, c.Partitions, c.Partitions))
	}
	return errors.Join(errs...)
}

// Producer writes pushed mutations to canon.mutations.
//
// Its endpoints answer as soon as they are mounted, Run or not: a push
// is written once Kafka acknowledges it. What follows the changelog
// (Config.Partitions set) starts in Run; until it follows the changelog a
// push with ?wait=applied is answered 503 with a Retry-After, before
// anything is written, and Ready reports it.
type Producer struct {
	cfg Config
	cl  *kgo.Client
	// rounds shares produce requests between pushes; nil with
	// Config.ProduceDirect.
	rounds  *rounds
	limiter *limiter
	m       *metrics
	// watch follows the changelog once Run started it; nil when
	// Config.Partitions is 0.
	watch   *watcher
	running atomic.Bool
	closing sync.Once
}

// New checks cfg and makes the Kafka producer client, which connects on
// the first push; nothing runs until Run.
func New(cfg Config) (*Producer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	// A round's records are buffered at once: room for the largest
	// push besides a round's worth (rounds.go).
	roundLimit := max(DefaultRoundRecords, cfg.MaxBatch)
	if !cfg.ProduceDirect {
		// Rounds flush by hand, and a producer that flushes by hand
		// refuses records beyond its buffer instead of waiting.
		opts = append(opts, kgo.ManualFlushing(), kgo.MaxBufferedRecords(2*roundLimit))
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.DefaultProduceTopic(cfg.Topics.Mutations),
		// Idempotent (franz-go's default) with acks=all: a retried batch is
		// written once, in order.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		// Keyed records go where Java's default partitioner puts them
		// (murmur2), which is schemas.Partition; an org deploy's records
		// go to the partition they name (deploy.go).
		kgo.RecordPartitioner(partitioner()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	p := &Producer{cfg: cfg, cl: cl, limiter: newLimiter(cfg.Rate, cfg.Burst), m: newMetrics(cfg.Registerer)}
	if !cfg.ProduceDirect {
		p.rounds = &rounds{cl: cl, limit: roundLimit, m: p.m, gather: max(cfg.RoundGather, 0)}
	}
	if cfg.Partitions > 0 {
		if p.watch, err = newWatcher(&p.cfg); err != nil {
			cl.Close()
			return nil, err
		}
		if p.rounds != nil {
			p.watch.answered = p.rounds.answered
		}
	}
	return p, nil
}

// Run follows the changelog (when Config.Partitions is set) until ctx
// ends, then flushes what pushes wrote and closes the Kafka client. It
// fails when the changelog's end offsets cannot be read within
// Config.ProduceTimeout; a changelog that cannot be followed later is
// logged, and pushes go on without ?wait=applied.
func (p *Producer) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("producer: Run called twice")
	}
	defer p.Close()
	if p.watch != nil {
		err := p.watch.run(ctx, p.cfg.ProduceTimeout)
		switch {
		case err == nil || ctx.Err() != nil:
		case !p.watch.following():
			return err
		default:
			p.cfg.Log.Error("producer: stopped following the changelog; ?wait=applied is answered 503 until a restart",
				"topic", p.cfg.Topics.Versions, "err", err)
		}
	}
	<-ctx.Done()
	return nil
}

// Close stops following the changelog, flushes and closes the Kafka
// client. Run closes the producer when it returns; Close is for a
// producer whose Run was never called, and is safe to call more than
// once.
func (p *Producer) Close() {
	p.closing.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ProduceTimeout)
		defer cancel()
		_ = p.cl.Flush(ctx)
		p.cl.Close()
	})
}

// Mount adds the push endpoints to mux.
func (p *Producer) Mount(mux *http.ServeMux) {
	for pattern, h := range p.Routes() {
		mux.HandleFunc(pattern, h)
	}
}

// Routes are the push endpoints by http.ServeMux pattern ("METHOD
// /path"). docs/openapi.yaml documents exactly these (readapi's tests
// check it).
func (p *Producer) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/projects/{org}/{project}/push":    p.handlePush,
		"POST /replicache/v1/{org}/{project}/push":  p.handleReplicachePush,
		"PUT /v1/projects/{org}/{project}/mutators": p.handleDeploy,
		"PUT /v1/orgs/{org}/mutators":               p.handleDeploy,
	}
}

// Ready reports whether Kafka answers and, when the producer follows the
// changelog, whether Run has it followed.
func (p *Producer) Ready(ctx context.Context) error {
	if p.watch != nil && !p.watch.following() {
		return fmt.Errorf("producer: not yet following %s", p.cfg.Topics.Versions)
	}
	return p.cl.Ping(ctx)
}

// produce writes the mutations, all of one project, and waits for Kafka's
// acknowledgement. The records of one request go to one partition in
// order; the idempotent producer keeps that order through retries.
func (p *Producer) produce(ctx context.Context, ms []*schemas.Mutation, values [][]byte, received time.Time) ([]wire.Written, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProduceTimeout)
	defer cancel()
	// The records share their key and headers (all are of one project),
	// and are allocated together: franz-go does not modify them.
	key := schemas.ProjectKey(ms[0].Org, ms[0].Project)
	headers := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}
	block := make([]kgo.Record, len(ms))
	recs := make([]*kgo.Record, len(ms))
	for i := range ms {
		block[i] = kgo.Record{Key: key, Value: values[i], Timestamp: received, Headers: headers}
		recs[i] = &block[i]
	}
	// The in-process sequencer's hint (Config.Inflight) counts the
	// records until they are acknowledged or failed, which for a push
	// that gave up at its deadline with its records in flight is after
	// it returns.
	var settled func(error)
	if n := p.cfg.Inflight.Partitions(); n > 0 {
		part, last := schemas.Partition(key, n), recs[len(recs)-1]
		p.cfg.Inflight.Writing(part, len(recs))
		settled = func(err error) {
			end := int64(0)
			if err == nil && last.Partition == part {
				end = last.Offset + 1
			}
			p.cfg.Inflight.Written(part, len(recs), end)
		}
	}
	err := p.send(ctx, recs, ms[len(ms)-1].Client, settled)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Written, len(recs))
	for i, r := range recs {
		out[i] = wire.Written{Client: ms[i].Client, ID: ms[i].ID, Partition: r.Partition, Offset: r.Offset}
	}
	return out, nil
}

// send produces recs and waits for Kafka's acknowledgements: at once, or
// in a round shared with concurrent pushes unless Config.ProduceDirect.
// It returns the first record's error; settled, when not nil, gets it
// once the records are acknowledged or failed (or were not sent), later
// than send returns when ctx ended while they were in flight. client is
// the push's (its last mutation's; "" for none), for the rounds' gather.
func (p *Producer) send(ctx context.Context, recs []*kgo.Record, client string, settled func(error)) error {
	if p.rounds != nil {
		return p.rounds.produceSettled(ctx, recs, client, settled)
	}
	return produceDirect(ctx, p.cl, recs, settled)
}

// produceDirect produces recs at once and waits for their
// acknowledgements, or until ctx ends. Unlike ProduceSync, which waits
// for a record in flight however long the broker takes to answer (the
// idempotent producer cannot fail it), it returns at ctx's end; the
// records may still be written, and the retried push is deduplicated.
func produceDirect(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, settled func(error)) error {
	if len(recs) == 0 {
		if settled != nil {
			settled(nil)
		}
		return nil
	}
	pp := &roundPush{done: make(chan struct{})}
	var left atomic.Int64
	left.Store(int64(len(recs)))
	for _, rec := range recs {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				pp.fail(err)
			}
			if left.Add(-1) == 0 {
				close(pp.done)
			}
		})
	}
	return pp.acked(ctx, settled)
}
