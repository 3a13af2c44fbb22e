// Package history is the ClickHouse history projector: a consumer group
// on canon.versions (read_committed) that turns every version record into
// rows of the history tables (versions, mutations, item changes, scalar
// changes, and a materialized view of activity per client per day) and
// commits its offsets only after ClickHouse took the rows. Delivery is at
// least once; the tables are ReplacingMergeTrees keyed by each row's
// identity, so rows delivered again collapse, and analysts query them in
// the deduplicated form documented in docs/analytics.md.
//
// The schema lives in migrations/*.sql, embedded in the binary and
// applied by Migrate (`canon migrate`, and at every projector start).
package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// DefaultGroup is the projector's consumer group, prefixed by a
// deployment's topic prefix. Warning: a new group name starts from the
// earliest offset and inserts all of history again (harmless, the tables
// deduplicate, but slow on a large topic).
const DefaultGroup = "canon-projector-history"

// Defaults of Config.
const (
	DefaultBatchRows     = 50_000
	DefaultBatchBytes    = 256 << 20
	DefaultBatchInterval = 5 * time.Second
	DefaultLagInterval   = 5 * time.Second
)

// Config configures a Projector.
type Config struct {
	// Kafka is the connection; ClientID names the client (default
	// "canon-projector").
	Kafka  kafka.ClientConfig
	Topics kafka.TopicNames
	// Group is the consumer group (default DefaultGroup). A group without
	// committed offsets starts at the earliest offset of canon.versions.
	Group string
	// ClickHouse says where the tables are.
	ClickHouse ClickHouseConfig
	// BatchRows, BatchBytes and BatchInterval bound a batch: it is
	// inserted when it holds BatchRows rows, or BatchBytes bytes of
	// bodies, chunks and args, or its first record is BatchInterval old,
	// whichever comes first (defaults 50 000, 256 MiB and 5s).
	//
	// Each batch is one INSERT, hence at least one new part, per table;
	// the server merges parts in the background. Fewer, larger batches
	// cost ClickHouse less CPU per row; analysts see a version up to
	// BatchInterval (plus the insert) after it was committed. 256 MiB is
	// ClickHouse's min_insert_block_size_bytes: a larger insert makes
	// more than one part anyway. See docs/analytics.md.
	BatchRows     int
	BatchBytes    int
	BatchInterval time.Duration
	// SessionTimeout is the group session timeout (0: franz-go's 45s).
	// A crashed instance's partitions move after it.
	SessionTimeout time.Duration
	// SkipMigrate does not apply the migrations at start (the tables must
	// exist: `canon migrate`).
	SkipMigrate bool
	// LagInterval is how often the lag gauge is refreshed (default 5s).
	LagInterval time.Duration
	// Limits bound decoded records; zero fields take schemas.DefaultLimits.
	Limits     schemas.Limits
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// Validate reports what is missing or wrong in cfg.
func (c *Config) Validate() error {
	if c.Topics.Versions == "" || c.Topics.Rejected == "" {
		return errors.New("projector: Topics.Versions and Topics.Rejected must be set")
	}
	if c.BatchRows < 0 {
		return fmt.Errorf("projector: batch rows %d: use a positive number (0 takes %d)", c.BatchRows, DefaultBatchRows)
	}
	if c.BatchBytes < 0 {
		return fmt.Errorf("projector: batch bytes %d: use a positive number (0 takes %d)", c.BatchBytes, DefaultBatchBytes)
	}
	if c.BatchInterval < 0 {
		return fmt.Errorf("projector: batch interval %s: use a positive duration (0 takes %s)", c.BatchInterval, DefaultBatchInterval)
	}
	if err := c.ClickHouse.Validate(); err != nil {
		return err
	}
	if _, err := c.Kafka.Opts(); err != nil {
		return err
	}
	return nil
}

func (c *Config) defaults() {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Kafka.ClientID == "" {
		c.Kafka.ClientID = "canon-projector"
	}
	if c.BatchRows == 0 {
		c.BatchRows = DefaultBatchRows
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = DefaultBatchInterval
	}
	if c.LagInterval <= 0 {
		c.LagInterval = DefaultLagInterval
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.ClickHouse.defaults()
}

// Projector projects canon.versions into the ClickHouse history tables.
type Projector struct {
	cfg Config
	// opts are the Kafka client's; Run makes cl with them.
	opts []kgo.Opt
	cl   *kgo.Client
	conn driver.Conn
	w    *writer
	m    *metrics
	// ready is set once the migrations are applied and ClickHouse answers.
	ready atomic.Bool
	// inserted counts the rows inserted (redelivered ones included).
	inserted atomic.Int64

	// mu guards what follows: the poll loop and the rebalance callbacks
	// share it.
	mu         sync.Mutex
	batch      rows
	batchStart time.Time
	// dirty counts records read since the last commit, so that a batch of
	// transaction markers or rejected records is committed too.
	dirty   int
	parts   map[int32]*partState
	rejects []*kgo.Record
	// branches caches the scalars of the last version projected per
	// branch; batchScalars those of every version of the batch, and
	// inflight's of the batch being inserted (what a later version may
	// diff against before ClickHouse has them).
	branches     map[branchKey]cachedScalars
	batchScalars map[versionKey]scalarSet
	// inflight is the batch being inserted while the next one is read;
	// insertCtx bounds its retries.
	inflight  *inflightBatch
	insertCtx context.Context
	// batchContent is the content of the batch (see content.go), cache
	// what outlives batches.
	batchContent batchContent
	cache        contentCache
	// failed is the error of a failed insert: after it nothing is
	// committed any more, so that the batch is read again at the next
	// start.
	failed error
}

// inflightBatch is a batch handed to an insert goroutine, and the offsets
// to commit once ClickHouse has it.
type inflightBatch struct {
	// done is closed when the insert finished, with err set.
	done    chan struct{}
	err     error
	offsets map[int32]kgo.EpochOffset
	scalars map[versionKey]scalarSet
	content batchContent
	started time.Time
}

// partState is the position of one owned partition.
type partState struct {
	// next is the offset after the last record read (transaction markers
	// included); epoch is that record's leader epoch.
	next  int64
	epoch int32
	// chunks are the chunk records read since the last version record,
	// by hash, of chunkProject; firstChunk is the offset of the first, or
	// -1. A commit never goes past firstChunk: after a restart the chunks
	// are read again before the version they belong to.
	chunks       map[string]*newChunk
	chunkProject string
	firstChunk   int64
	// committed is the last offset committed, -1 before the first commit.
	committed int64
}

type branchKey struct{ org, project, branch string }

type versionKey struct {
	branchKey
	version uint64
}

type cachedScalars struct {
	version uint64
	scalars scalarSet
}

// maxCachedBranches bounds the scalars cache; past it the cache starts
// over (a miss costs one ClickHouse lookup).
const maxCachedBranches = 100_000

// New checks cfg; Run connects to Kafka and ClickHouse and joins the group.
func New(cfg Config) (*Projector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	p := &Projector{
		cfg:          cfg,
		m:            newMetrics(cfg.Registerer, cfg.Group),
		parts:        map[int32]*partState{},
		branches:     map[branchKey]cachedScalars{},
		batchScalars: map[versionKey]scalarSet{},
		insertCtx:    context.Background(),
		batchContent: newBatchContent(),
		cache:        newContentCache(),
	}
	opts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics.Versions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers too: a partition whose last record is a commit marker is
		// then committed up to its high watermark, and its lag reaches 0.
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.revoked),
		kgo.OnPartitionsLost(p.lost),
		kgo.FetchMaxBytes(64<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
	)
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(cfg.SessionTimeout/3))
	}
	p.opts = opts
	return p, nil
}

// Ready reports whether the projector runs: ClickHouse answered and the
// tables exist.
func (p *Projector) Ready(ctx context.Context) error {
	if !p.ready.Load() {
		return errors.New("projector: connecting to ClickHouse and applying migrations")
	}
	if err := p.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ClickHouse %v does not answer: %w", p.cfg.ClickHouse.Addr, err)
	}
	return nil
}

// Committed returns the offsets of canon.versions the group committed
// through this projector, by partition, for the partitions it owns.
func (p *Projector) Committed() map[int32]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int32]int64, len(p.parts))
	for part, ps := range p.parts {
		out[part] = ps.committed
	}
	return out
}

// Run projects until ctx ends or ClickHouse or Kafka fail for good; it
// inserts and commits what it read before returning, and leaves the
// group.
func (p *Projector) Run(ctx context.Context) error {
	// The client joins the group as soon as it exists: it is made here,
	// not in New, so that a projector that does not run yet holds no
	// partitions.
	if p.cl != nil {
		return errors.New("projector: Run called twice")
	}
	var err error
	if p.cl, err = kgo.NewClient(p.opts...); err != nil {
		return fmt.Errorf("projector: kafka client: %w", err)
	}
	if err := p.connect(ctx); err != nil {
		p.cl.Close()
		return err
	}
	p.ready.Store(true)
	// Inserts outlive ctx by up to insertGrace, so that what was read is
	// inserted and committed at shutdown.
	ictx, icancel := context.WithCancel(context.WithoutCancel(ctx))
	defer icancel()
	p.mu.Lock()
	p.insertCtx = ictx
	p.mu.Unlock()
	lagDone := make(chan struct{})
	lctx, lcancel := context.WithCancel(ctx)
	go func() { defer close(lagDone); p.lagLoop(lctx) }()
	defer func() {
		p.ready.Store(false)
		lcancel()
		<-lagDone
		// Leaving the group runs the revoke callback, which still needs
		// ClickHouse.
		p.cl.Close()
		p.conn.Close()
	}()

	p.cfg.Log.Info("projector started", "group", p.cfg.Group, "topic", p.cfg.Topics.Versions,
		"clickhouse", p.cfg.ClickHouse.Addr, "database", p.cfg.ClickHouse.Database,
		"batch_rows", p.cfg.BatchRows, "batch_interval", p.cfg.BatchInterval)
	for {
		err := p.pollOnce(ctx)
		p.cl.AllowRebalance()
		if ctx.Err() != nil {
			// Insert and commit what was read, with a fresh deadline.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), insertGrace)
			stop := context.AfterFunc(fctx, icancel)
			p.mu.Lock()
			ferr := p.flush(fctx)
			p.mu.Unlock()
			stop()
			cancel()
			if ferr != nil {
				p.cfg.Log.Warn("projector: last batch not committed; it is projected again at the next start", "err", ferr)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// insertGrace bounds the insert and commit of the last batches at
// shutdown and before partitions move.
const insertGrace = 30 * time.Second

// connect opens ClickHouse and applies the migrations, retrying while
// ClickHouse does not answer.
func (p *Projector) connect(ctx context.Context) error {
	return retry(ctx, p.cfg.Log, p.m.retries, "connect to ClickHouse", func() error {
		conn, err := p.cfg.ClickHouse.Open(ctx)
		if err != nil {
			return err
		}
		if !p.cfg.SkipMigrate {
			if _, err := Migrate(ctx, conn, p.cfg.ClickHouse.Database); err != nil {
				conn.Close()
				return err
			}
		}
		p.conn = conn
		p.w = &writer{conn: conn, db: p.cfg.ClickHouse.Database}
		return nil
	})
}

// pollOnce polls, projects what came, and inserts and commits the batch
// when it is full or old enough.
func (p *Projector) pollOnce(ctx context.Context) error {
	pctx := ctx
	p.mu.Lock()
	if p.dirty > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, p.batchStart.Add(p.cfg.BatchInterval))
		defer cancel()
	}
	if f := p.inflight; f != nil {
		// Wake up when the batch in flight is inserted, to commit it.
		var cancel context.CancelFunc
		pctx, cancel = context.WithCancel(pctx)
		defer cancel()
		go func() {
			select {
			case <-f.done:
				cancel()
			case <-pctx.Done():
			}
		}()
	}
	// Every record makes at least one row: polling no more records than
	// the batch has room for rows keeps batches near BatchRows.
	room := max(1, p.cfg.BatchRows-p.batch.len())
	p.mu.Unlock()
	fs := p.cl.PollRecords(pctx, room)
	if fs.IsClientClosed() {
		return kgo.ErrClientClosed
	}
	fs.EachError(func(topic string, part int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			p.cfg.Log.Warn("projector fetch", "topic", topic, "partition", part, "err", err)
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	fs.EachRecord(func(r *kgo.Record) {
		if err == nil {
			err = p.handle(ctx, r)
		}
		// A poll may hold many batches' rows: hand each full one off.
		if err == nil && p.full() {
			err = p.handoff(ctx)
		}
	})
	if err != nil {
		return err
	}
	if f := p.inflight; f != nil {
		select {
		case <-f.done:
			if err := p.settle(ctx); err != nil {
				return err
			}
		default:
		}
	}
	if p.dirty > 0 && (p.full() || time.Since(p.batchStart) >= p.cfg.BatchInterval) {
		return p.handoff(ctx)
	}
	return nil
}

// full reports whether the batch holds BatchRows rows or BatchBytes
// bytes.
func (p *Projector) full() bool {
	return p.batch.len() >= p.cfg.BatchRows || p.batch.bytes() >= p.cfg.BatchBytes
}

// part returns the state of an owned partition, creating it.
func (p *Projector) part(part int32) *partState {
	ps := p.parts[part]
	if ps == nil {
		ps = &partState{firstChunk: -1, committed: -1, next: -1}
		p.parts[part] = ps
	}
	return ps
}

// handle projects one record into the batch. Its error is a ClickHouse
// lookup that failed until ctx ended.
func (p *Projector) handle(ctx context.Context, r *kgo.Record) error {
	if p.dirty == 0 {
		p.batchStart = time.Now()
	}
	p.dirty++
	ps := p.part(r.Partition)
	ps.next, ps.epoch = r.Offset+1, r.LeaderEpoch
	if r.Attrs.IsControl() {
		return nil
	}
	var schema, hash string
	for _, h := range r.Headers {
		switch h.Key {
		case schemas.HeaderSchema:
			schema = string(h.Value)
		case schemas.HeaderChunkHash:
			hash = string(h.Value)
		}
	}
	cr, err := schemas.DecodeChangelog(schema, hash, r.Key, r.Value, p.cfg.Limits)
	if err != nil {
		p.reject(r, schema, err)
		return nil
	}
	if cr.Deploy != nil {
		// An activation changes no state: the versions after it name
		// its bundle.
		return nil
	}
	c, v := cr.Chunk, cr.Version
	if c != nil {
		project := c.Org + "/" + c.Project
		if len(ps.chunks) > 0 && ps.chunkProject != project {
			// The sequencer writes a version's chunks just before it; chunks
			// of another project without their version are not new bytes
			// of anything this projector will see.
			p.cfg.Log.Warn("projector: chunks without their version", "partition", r.Partition,
				"project", ps.chunkProject, "chunks", len(ps.chunks), "offset", r.Offset)
			ps.chunks, ps.firstChunk = nil, -1
		}
		if ps.chunks == nil {
			ps.chunks = map[string]*newChunk{}
			ps.firstChunk = r.Offset
		}
		ps.chunkProject = project
		ps.chunks[c.Hash] = &newChunk{size: int64(len(c.Data))}
		p.addChunk(c, r.Offset)
		return nil
	}
	if org, project, kerr := schemas.ParseProjectKey(r.Key); kerr != nil || org != v.Org || project != v.Project {
		p.reject(r, schema, fmt.Errorf("record key %q is not the key of project %s/%s", r.Key, v.Org, v.Project))
		return nil
	}
	return p.project(ctx, r, ps, v)
}

// project adds the rows of a decoded version.
func (p *Projector) project(ctx context.Context, r *kgo.Record, ps *partState, v *schemas.Version) error {
	cur, curJSON, err := compactScalars(v.Scalars)
	if err != nil {
		p.reject(r, schemas.SchemaVersionV1, fmt.Errorf("scalars: %w", err))
		return nil
	}
	prev, err := p.previousScalars(ctx, v)
	if err != nil {
		return err
	}
	bigArgs, err := p.content(ctx, v, r.Offset)
	if err != nil {
		return err
	}
	var chunks map[string]*newChunk
	if ps.chunkProject == v.Org+"/"+v.Project {
		chunks = ps.chunks
	}
	p.batch.addVersion(v, r.Partition, r.Offset, r.Timestamp.UnixMilli(), cur, curJSON, prev, chunks, bigArgs)
	ps.chunks, ps.chunkProject, ps.firstChunk = nil, "", -1

	bk := branchKey{v.Org, v.Project, v.Branch}
	if len(p.branches) >= maxCachedBranches {
		clear(p.branches)
	}
	p.branches[bk] = cachedScalars{version: v.Version, scalars: cur}
	p.batchScalars[versionKey{bk, v.Version}] = cur
	p.m.versions.Inc()
	return nil
}

// previousScalars returns the scalars a version's scalar changes are
// diffed against: those of the version before it on its branch, or for
// the first version of a branch made from another, of its base; none for
// the first version of main. They come from memory, else from ClickHouse,
// which has every version before those of the current batch (a batch is
// committed only after its rows are inserted).
func (p *Projector) previousScalars(ctx context.Context, v *schemas.Version) (scalarSet, error) {
	want := versionKey{branchKey{v.Org, v.Project, v.Branch}, v.Version - 1}
	if v.Version <= 1 {
		if v.Base == nil {
			return nil, nil
		}
		want = versionKey{branchKey{v.Org, v.Project, v.Base.Branch}, v.Base.Version}
	}
	if c, ok := p.branches[want.branchKey]; ok && c.version == want.version {
		return c.scalars, nil
	}
	if s, ok := p.batchScalars[want]; ok {
		return s, nil
	}
	if p.inflight != nil {
		if s, ok := p.inflight.scalars[want]; ok {
			return s, nil
		}
	}
	var (
		s     scalarSet
		found bool
	)
	err := retry(ctx, p.cfg.Log, p.m.retries, "read previous scalars", func() error {
		var err error
		s, found, err = p.w.scalarsAt(ctx, want.org, want.project, want.branch, want.version)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !found {
		p.cfg.Log.Warn("projector: previous version not in ClickHouse; scalar changes of this version are against no scalars",
			"project", v.Org+"/"+v.Project, "branch", v.Branch, "version", v.Version,
			"missing", fmt.Sprintf("%s@%d", want.branch, want.version), "database", p.cfg.ClickHouse.Database)
	}
	return s, nil
}

// reject queues a rejected/v1 record for a changelog record the projector
// cannot handle; it is produced before the batch is committed.
func (p *Projector) reject(r *kgo.Record, schema string, cause error) {
	rej := &schemas.Rejected{
		Reason: schemas.ReasonProjection, Message: "history projector: " + cause.Error(),
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Schema: schema,
		Value: r.Value[:min(len(r.Value), schemas.MaxRejectedValueBytes)],
		At:    time.Now().UnixMilli(),
	}
	value, err := schemas.EncodeRejected(rej, p.cfg.Limits)
	if err != nil {
		// Every field is the projector's own: a bug, not bad input.
		panic(fmt.Sprintf("history: encode rejected record: %v", err))
	}
	p.cfg.Log.Warn("projector: record rejected", "partition", r.Partition, "offset", r.Offset, "schema", schema, "err", cause)
	p.rejects = append(p.rejects, &kgo.Record{Topic: p.cfg.Topics.Rejected, Key: r.Key, Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaRejectedV1)}}})
}

// flush inserts and commits everything read: the batch in flight and
// the current one; p.mu is held.
func (p *Projector) flush(ctx context.Context) error {
	if err := p.handoff(ctx); err != nil {
		return err
	}
	return p.settle(ctx)
}

// handoff waits for the batch in flight, then hands the current batch to
// an insert goroutine together with the offsets to commit after it, so
// that the next batch is read while this one is inserted; p.mu is held.
func (p *Projector) handoff(ctx context.Context) error {
	if p.dirty == 0 {
		return p.failed
	}
	if err := p.settle(ctx); err != nil {
		return err
	}
	b, rejects := p.batch, p.rejects
	f := &inflightBatch{done: make(chan struct{}), offsets: p.positions(), scalars: p.batchScalars, content: p.batchContent,
		started: time.Now()}
	p.batch, p.rejects, p.batchScalars, p.dirty = rows{}, nil, map[versionKey]scalarSet{}, 0
	p.batchContent = newBatchContent()
	p.cache.prune()
	p.inflight = f
	ictx := p.insertCtx
	go func() {
		f.err = p.insert(ictx, &b, rejects)
		close(f.done)
	}()
	return nil
}

// settle waits for the batch in flight and commits its offsets; p.mu is
// held. After a failed insert nothing is committed any more, and the
// error ends the projector: what was read since is read again at the
// next start.
func (p *Projector) settle(ctx context.Context) error {
	if p.failed != nil {
		return p.failed
	}
	f := p.inflight
	if f == nil {
		return nil
	}
	<-f.done
	p.inflight = nil
	if f.err != nil {
		p.failed = f.err
		return f.err
	}
	p.commit(ctx, f.offsets)
	p.m.batches.Inc()
	p.m.flushSec.Observe(time.Since(f.started).Seconds())
	return nil
}

// insert writes a batch to ClickHouse and its rejected records to Kafka,
// retrying until ctx ends.
func (p *Projector) insert(ctx context.Context, b *rows, rejects []*kgo.Record) error {
	if b.len() > 0 {
		if err := retry(ctx, p.cfg.Log, p.m.retries, "insert into ClickHouse", func() error {
			return p.w.insertAll(ctx, b)
		}); err != nil {
			return err
		}
		p.inserted.Add(int64(b.len()))
		p.m.rows.WithLabelValues(versionsTable.name).Add(float64(len(b.versions.org)))
		p.m.rows.WithLabelValues(mutationsTable.name).Add(float64(len(b.mutations.org)))
		p.m.rows.WithLabelValues(itemsTable.name).Add(float64(len(b.items.org)))
		p.m.rows.WithLabelValues(scalarsTable.name).Add(float64(len(b.scalars.org)))
		p.m.rows.WithLabelValues(bodiesTable.name).Add(float64(len(b.bodies.org)))
		p.m.rows.WithLabelValues(chunksTable.name).Add(float64(len(b.chunks.org)))
		p.m.rows.WithLabelValues(branchesTable.name).Add(float64(len(b.branches.org)))
	}
	if len(rejects) > 0 {
		if err := retry(ctx, p.cfg.Log, p.m.retries, "produce rejected records", func() error {
			return p.cl.ProduceSync(ctx, rejects...).FirstErr()
		}); err != nil {
			return err
		}
		p.m.rejected.Add(float64(len(rejects)))
	}
	return nil
}

// positions are the offsets to commit for the owned partitions: after the
// last record read, or at the first chunk whose version was not read yet.
func (p *Projector) positions() map[int32]kgo.EpochOffset {
	out := map[int32]kgo.EpochOffset{}
	for part, ps := range p.parts {
		at := ps.next
		if ps.firstChunk >= 0 {
			at = ps.firstChunk
		}
		if at > ps.committed {
			out[part] = kgo.EpochOffset{Epoch: ps.epoch, Offset: at}
		}
	}
	return out
}

// commit commits offsets of the partitions still owned. A failed commit
// is logged: the rows are in ClickHouse, and what is read again
// collapses.
func (p *Projector) commit(ctx context.Context, offsets map[int32]kgo.EpochOffset) {
	owned := map[int32]kgo.EpochOffset{}
	for part, o := range offsets {
		if ps := p.parts[part]; ps != nil && o.Offset > ps.committed {
			owned[part] = o
		}
	}
	if len(owned) == 0 {
		return
	}
	p.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{p.cfg.Topics.Versions: owned},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				p.cfg.Log.Warn("projector: commit offsets", "err", err)
				return
			}
			for _, t := range resp.Topics {
				for _, pr := range t.Partitions {
					if cerr := kerr.ErrorForCode(pr.ErrorCode); cerr != nil {
						p.cfg.Log.Warn("projector: commit offset", "partition", pr.Partition, "err", cerr)
						continue
					}
					if ps := p.parts[pr.Partition]; ps != nil {
						ps.committed = owned[pr.Partition].Offset
					}
				}
			}
		})
}

// assigned notes new partitions; their position is the group's committed
// offset, which the first record read tells.
func (p *Projector) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	p.cfg.Log.Info("projector: partitions assigned", "partitions", assigned[p.cfg.Topics.Versions])
}

// revoked inserts and commits what was read of every partition before
// the revoked ones move to another instance.
func (p *Projector) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	parts := revoked[p.cfg.Topics.Versions]
	p.cfg.Log.Info("projector: partitions revoked", "partitions", parts)
	p.mu.Lock()
	defer p.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), insertGrace)
	defer cancel()
	if err := p.flush(fctx); err != nil {
		p.cfg.Log.Warn("projector: batch of revoked partitions not committed; their new owner projects it again", "err", err)
	}
	p.drop(parts)
}

// lost forgets partitions the group took away without a revoke: their
// offsets are not ours to commit any more. Rows already read stay in the
// batch: inserting them again later is harmless.
func (p *Projector) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	parts := lost[p.cfg.Topics.Versions]
	p.cfg.Log.Warn("projector: partitions lost", "partitions", parts)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop(parts)
}

func (p *Projector) drop(parts []int32) {
	for _, part := range parts {
		delete(p.parts, part)
		p.m.lag.DeleteLabelValues(strconv.Itoa(int(part)))
	}
}

// lagLoop refreshes the lag gauge: per partition of the versions topic,
// its high watermark minus the group's committed offset.
func (p *Projector) lagLoop(ctx context.Context) {
	adm := kadm.NewClient(p.cl)
	t := time.NewTicker(p.cfg.LagInterval)
	defer t.Stop()
	for {
		lag, err := GroupLag(ctx, adm, p.cfg.Group, p.cfg.Topics.Versions)
		if err != nil && ctx.Err() == nil {
			p.cfg.Log.Debug("projector: lag", "err", err)
		}
		for part, l := range lag {
			p.m.lag.WithLabelValues(strconv.Itoa(int(part))).Set(float64(l))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// GroupLag returns, per partition of topic, its high watermark minus the
// committed offset of group (the whole partition when nothing is
// committed).
func GroupLag(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Err == nil {
			from = s.Offset
		}
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			from = max(from, c.At)
		}
		out[o.Partition] = max(o.Offset-from, 0)
	})
	return out, nil
}

// retry runs fn until it succeeds or ctx ends, with a growing pause.
func retry(ctx context.Context, log *slog.Logger, retries prometheus.Counter, what string, fn func() error) error {
	pause := 200 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		retries.Inc()
		log.Warn("projector: "+what+"; retrying", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}
