package changelog

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// Sink is what a Materializer brings up to date: a store.Store, or a
// reader's own view built on one. Its methods are the store's.
type Sink interface {
	// Offset is the next changelog offset of a partition the sink holds;
	// ok is false when it holds nothing of it.
	Offset(partition int32) (offset int64, ok bool, err error)
	// Apply writes records of a partition and its next offset at once;
	// it refuses (store.Refused) records that do not follow what it holds.
	Apply(partition int32, recs []store.Record, nextOffset int64) error
	// DropPartition forgets everything of a partition, its offset too.
	DropPartition(partition int32) error
}

// RejectionSink is a Sink that also records the rejections of its
// partitions' mutations (see MaterializerConfig.Rejections).
type RejectionSink interface {
	Sink
	// PartitionOf is the partition of a project.
	PartitionOf(org, project string) int32
	// RejectedOffset is the next offset of canon.rejected[partition] recorded.
	RejectedOffset(partition int32) (offset int64, ok bool, err error)
	// RecordRejections records rejections read from canon.rejected[partition]
	// and the partition's next offset at once.
	RecordRejections(rejs []*schemas.Rejected, partition int32, nextOffset int64) error
}

// Checkpoints restores partitions of a sink from checkpoints in object
// storage (package internal/checkpoint), so that a Materializer reads only
// the changelog tail after them.
type Checkpoints interface {
	// Restore replaces partition p of the sink with the newest valid
	// checkpoint of changelog incarnation topicID (TopicID) whose offset
	// is in (after, upTo], and returns its offset; ok is false when there
	// is none. An invalid checkpoint is skipped, never restored; an error
	// means the bucket could not be read, and the partition is untouched.
	Restore(ctx context.Context, p int32, topicID string, after, upTo int64) (offset int64, ok bool, err error)
}

// UncheckedCheckpoints are Checkpoints that can restore a partition
// before its files are all checked against their checksums: check (nil
// when nothing is left to check) waits for that, and fails when one is
// corrupt; reads meanwhile are guarded by the store's own block
// checksums (a corrupt block is a read error, never wrong data). A
// checkpoint whose check failed is never restored again by the same
// UncheckedCheckpoints (checkpoint.Bucket remembers it), so that the
// partition's next restore falls back to an older checkpoint or to the
// changelog's first record.
//
// A bounded Materializer reads the tail meanwhile; it then hands the
// check to Hooks.Checking when that is set, and returns at once, or
// otherwise waits for it before it returns. A Forever materializer reads
// and writes meanwhile, and learns of the check's end between polls. A
// corrupt checkpoint found while the materializer runs is dropped, and
// the partition restored again (Hooks.Dropped is told ErrCorruptCheckpoint).
type UncheckedCheckpoints interface {
	RestoreUnchecked(ctx context.Context, p int32, topicID string, after, upTo int64) (offset int64, ok bool, check func(context.Context) error, err error)
}

// DefaultCheckpointGain is MaterializerConfig.CheckpointGain when 0.
const DefaultCheckpointGain = 10_000

// Until is how far a Materializer reads: the offset policy.
type Until int

const (
	// LastStable reads up to the last stable offset of each partition as
	// of the start, and not beyond, then returns: every transaction
	// committed by then is in the sink, and a transaction still open is
	// not waited for (the caller decides what an open one means). The
	// sequencer's restore.
	LastStable Until = iota
	// End reads up to the end offset (high watermark) of each partition
	// as of the start, then returns: a transaction that has just
	// committed but whose commit marker is not written yet is waited for,
	// as is one still open (it ends within the transaction timeout). What
	// the last poll returned beyond the end is taken too. A job's history.
	End
	// Forever follows the changelog until the context ends, writing to the
	// sink after each poll. Read replicas; they are caught up once at the
	// last stable offsets of the start (see Hooks.Started).
	Forever
)

// DefaultBatch is how many records a Materializer writes to its sink at
// once when MaterializerConfig.Batch is 0.
const DefaultBatch = 2000

// MaterializerConfig configures a Materializer.
type MaterializerConfig struct {
	// Tail is how the changelog is read; its Partitions are the ones
	// materialized (nil: all PartitionCount). Its Start and FromStart are
	// set from the sink; canon.rejected is read as Tail says unless
	// Rejections is set.
	Tail Config
	Sink Sink
	// Until is the offset policy.
	Until Until
	// Batch is the most records written to the sink at once; 0 means
	// DefaultBatch.
	Batch int
	// Rejections also records, in the sink (a RejectionSink), the
	// rejections of the partitions' mutations read from canon.rejected, all
	// Tail.RejectedPartitions of it, from the offsets the sink holds.
	Rejections bool
	// Admin, when set, lists offsets; otherwise the tail's client does.
	Admin *kgo.Client
	// Checkpoints, when set, restores a partition from the newest usable
	// checkpoint before its tail is read: restore = checkpoint + tail. It
	// is used when the sink holds nothing of the partition, or is more
	// than CheckpointGain offsets behind a checkpoint. The sink must be
	// the store the Checkpoints restore into.
	Checkpoints Checkpoints
	// CheckpointGain is how many offsets a checkpoint must be ahead of
	// what the sink holds to be restored instead of reading them;
	// DefaultCheckpointGain when 0.
	CheckpointGain int64
	Hooks          Hooks
}

// Hooks tell a Materializer's caller what it does; nil ones are not called.
// They run on the goroutine of Run or Take.
type Hooks struct {
	// Started is told, each time reading (re)starts, the offset each
	// partition is read from and its target: the offset where a bounded
	// policy stops, the last stable offset at the start with Forever.
	Started func(from, targets map[int32]int64)
	// Applied is told that the sink holds a partition up to next, after a
	// write of records whose values sum to bytes.
	Applied func(partition int32, next int64, records int, bytes int64)
	// Wrote, when set, is told the records of a write after the sink
	// holds them: from is where the sink was before, next where it is
	// now; every record of the changelog between is in evs. A feed's
	// Publish takes exactly this. Not told of writes that skipped
	// records.
	Wrote func(partition int32, from int64, evs []Event, next int64)
	// Skipped is told of a record that no sequencer wrote, after it is
	// logged: it is not in the sink.
	Skipped func(partition int32, offset int64, err error)
	// Dropped is told that a partition was dropped from the sink because
	// the changelog does not explain it: it is read again from the start.
	Dropped func(partition int32, err error)
	// Restored is told that a partition was restored from a checkpoint
	// that holds it up to offset.
	Restored func(partition int32, offset int64)
	// Checking, when set, takes over the checks of the checkpoints a
	// bounded policy (LastStable, End) restored unchecked
	// (UncheckedCheckpoints): Run returns as soon as the tail is read,
	// and check (called once) waits for the check and fails when the
	// restored checkpoint is corrupt. The caller must then drop the
	// partition (Sink.DropPartition) and restore it again: the restore
	// falls back to an older checkpoint or to the changelog's first
	// record. Without Checking, Run waits for the check and does that
	// itself. Not used with Forever, which checks in the background on
	// its own. Called on the goroutine of Run, before it returns.
	Checking func(partition int32, check func(context.Context) error)
}

// Errors of a Materializer; a record of a newer schema is reported with
// schemas.ErrNewerSchema.
var (
	// ErrTruncated means the changelog no longer holds records the sink
	// needs: they were deleted, and nothing can rebuild the partition.
	ErrTruncated = errors.New("changelog records the store needs were deleted")
	// ErrCorruptCheckpoint is what Hooks.Dropped is told of a partition
	// dropped because its restored checkpoint failed its check.
	ErrCorruptCheckpoint = errors.New("restored checkpoint corrupt")
)

// Materializer brings a sink up to date from canon.versions for a set of
// partitions, from the offsets the sink holds, with one decision table:
//
//   - the sink is ahead of the changelog (its offset is beyond the last
//     stable offset: the topic was recreated): the partition is dropped
//     and rebuilt from the changelog's first record;
//   - the changelog is truncated (it starts after the sink's offset, or
//     after 0 for an empty sink): ErrTruncated, the partition cannot be
//     materialized;
//   - a record of a newer schema major: stop with schemas.ErrNewerSchema,
//     a newer Canon wrote it and this one must be upgraded (skipping it
//     would corrupt the state);
//   - a foreign record, which no sequencer wrote (it does not decode, or
//     the sink refuses it when reading from the first record): skipped,
//     logged and counted (Hooks.Skipped), rather than stalling the
//     partition forever;
//   - a record the sink refuses on top of what it held before: the sink
//     is wrong, the partition is dropped and rebuilt from the first
//     record (where a refusal then means a foreign record);
//   - otherwise records are written in batches with the offset after
//     them, transaction markers counted, so that the stored offset is
//     exact.
//
// How far it reads is the Until policy. It is not safe for concurrent use.
type Materializer struct {
	cfg   MaterializerConfig
	tail  *Tail
	parts map[int32]*partState
	// rejected is the recorded offset per partition of canon.rejected
	// (with Rejections).
	rejected map[int32]int64
	// noCheckpoint holds the partitions dropped for a rebuild: a
	// checkpoint the changelog's tail did not follow is not restored
	// again, they are rebuilt from the changelog's first record.
	noCheckpoint map[int32]bool
	topicID      string
	// checks wait for the checks of restored checkpoints that run while
	// the tail is read (UncheckedCheckpoints), per partition.
	checks map[int32]func(context.Context) error
}

// partState is a partition's materialization.
type partState struct {
	// fromStart: the sink holds nothing but what was read from the
	// changelog's first record, so a record it refuses is foreign.
	fromStart bool
	// applied is the offset the sink holds; target is the offset of the
	// policy (see Hooks.Started).
	applied, target int64
	recs            []store.Record
	offsets         []int64 // of recs
	evs             []Event // of recs, for Hooks.Wrote
	bytes           int64   // of recs
}

// errRebuild: a partition was dropped to be rebuilt; reading starts over.
var errRebuild = errors.New("partition dropped for a rebuild")

// NewMaterializer returns a materializer; Run reads.
func NewMaterializer(cfg MaterializerConfig) (*Materializer, error) {
	if cfg.Sink == nil {
		return nil, errors.New("changelog: materializer: no Sink")
	}
	if cfg.Tail.Partitions == nil {
		if cfg.Tail.PartitionCount <= 0 {
			return nil, errors.New("changelog: materializer: neither Partitions nor PartitionCount set")
		}
		for p := range cfg.Tail.PartitionCount {
			cfg.Tail.Partitions = append(cfg.Tail.Partitions, p)
		}
	}
	if cfg.Rejections {
		if _, ok := cfg.Sink.(RejectionSink); !ok {
			return nil, errors.New("changelog: materializer: Rejections needs a RejectionSink")
		}
		cfg.Tail.Rejected = true
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.CheckpointGain <= 0 {
		cfg.CheckpointGain = DefaultCheckpointGain
	}
	if cfg.Tail.Log == nil {
		cfg.Tail.Log = discard
	}
	return &Materializer{cfg: cfg, noCheckpoint: map[int32]bool{}, checks: map[int32]func(context.Context) error{}}, nil
}

// Run reads the changelog into the sink as the Until policy says: it
// returns once the targets are reached (LastStable, End), or when ctx
// ends (Forever: with ctx's error).
func (m *Materializer) Run(ctx context.Context) error {
	for {
		err := m.run(ctx)
		if !errors.Is(err, errRebuild) {
			return err
		}
	}
}

// Tail is the tail the materializer reads with, nil before Run or when a
// LastStable policy had nothing to read. After a bounded Run the caller
// may go on polling it and hand what it returns to Take.
func (m *Materializer) Tail() *Tail { return m.tail }

// Close stops the tail.
func (m *Materializer) Close() {
	if m.tail != nil {
		m.tail.Close()
		m.tail = nil
	}
}

// run is one pass: from the sink's offsets to the policy's targets, or
// until a partition is dropped for a rebuild.
func (m *Materializer) run(ctx context.Context) (err error) {
	m.Close()
	log := m.cfg.Tail.Log
	topic := m.cfg.Tail.Topics.Versions
	from := map[int32]int64{}
	stored := map[int32]bool{}
	for _, p := range m.cfg.Tail.Partitions {
		o, ok, err := m.cfg.Sink.Offset(p)
		if err != nil {
			return err
		}
		from[p], stored[p] = o, ok
	}
	if m.cfg.Admin == nil {
		if err := m.open(from); err != nil {
			return err
		}
	}
	first, stable, err := m.offsets(ctx)
	if err != nil {
		return err
	}
	reread, err := m.restoreCheckpoints(ctx, from, stored, stable)
	if err != nil {
		return err
	}
	m.parts = map[int32]*partState{}
	targets := map[int32]int64{}
	for _, p := range m.cfg.Tail.Partitions {
		switch o := from[p]; {
		case stored[p] && o > stable[p]:
			log.Warn("store is ahead of the changelog (topic recreated or truncated?): dropping the partition's local state and rebuilding it",
				"partition", p, "stored_offset", o, "changelog_end", stable[p])
			if err := m.drop(p, fmt.Errorf("stored offset %d is beyond the last stable offset %d", o, stable[p])); err != nil {
				return err
			}
			from[p], reread = first[p], true
		case o < first[p]:
			return fmt.Errorf("%w: %s[%d] starts at offset %d but the store needs it from %d (retention must be infinite: set retention.ms=-1)",
				ErrTruncated, topic, p, first[p], o)
		}
		targets[p] = stable[p]
		m.parts[p] = &partState{fromStart: from[p] == first[p], applied: from[p], target: stable[p]}
	}
	if m.cfg.Until == End {
		if targets, err = m.ends(ctx); err != nil {
			return err
		}
		for p, ps := range m.parts {
			ps.target = targets[p]
		}
	}
	if m.cfg.Hooks.Started != nil {
		m.cfg.Hooks.Started(maps.Clone(from), maps.Clone(targets))
	}
	if reread {
		m.Close() // it reads from the dropped offsets
	}
	var bg *backgroundChecks
	if m.cfg.Until == Forever && len(m.checks) > 0 {
		bg = m.checkInBackground(ctx)
		defer func() { err = bg.finish(ctx, err) }()
	}
	if m.cfg.Until != Forever && m.reached() {
		return m.checkedOrHanded(ctx)
	}
	if m.tail == nil {
		if err := m.open(from); err != nil {
			return err
		}
	}
	for m.cfg.Until == Forever || !m.reached() {
		pctx := ctx
		if bg != nil {
			pctx = bg.pollContext()
		}
		evs, err := m.tail.Poll(pctx)
		switch {
		case err == nil:
			err = m.Take(evs)
		case ctx.Err() == nil && pctx.Err() != nil:
			err = nil // a background check ended: see below
		case m.cfg.Until != Forever:
			err = fmt.Errorf("read %s: %w", topic, err)
		}
		if err != nil {
			// A corrupt checkpoint can fail the tail (a block whose
			// checksum fails): that is the one to report.
			if cerr := m.checked(ctx); cerr != nil && ctx.Err() == nil {
				return cerr
			}
			return err
		}
		if bg != nil {
			if err := bg.collect(); err != nil {
				return err
			}
		}
	}
	return m.checkedOrHanded(ctx)
}

// checkedOrHanded ends a bounded run: the checks of checkpoints restored
// unchecked go to Hooks.Checking when it is set, or are waited for.
func (m *Materializer) checkedOrHanded(ctx context.Context) error {
	if m.cfg.Hooks.Checking == nil {
		return m.checked(ctx)
	}
	for _, p := range slices.Sorted(maps.Keys(m.checks)) {
		m.cfg.Hooks.Checking(p, m.checks[p])
		delete(m.checks, p)
	}
	return nil
}

// backgroundChecks are the checks of checkpoints a Forever materializer
// restored unchecked, running while it reads: each result interrupts the
// poll, and a failed check drops its partition for a rebuild.
type backgroundChecks struct {
	m       *Materializer
	results chan checkResult
	running map[int32]bool // the checks whose result is not collected

	mu     sync.Mutex
	ctx    context.Context // the run's
	pctx   context.Context // the poll's: ctx, ended when a check ends
	cancel context.CancelFunc
}

type checkResult struct {
	p   int32
	err error
}

// checkInBackground starts the pending checks. They do not end with the
// run's ctx: they read local files only, and a run that ends waits for
// them (finish), so that a corrupt checkpoint is dropped rather than left
// in the sink unchecked.
func (m *Materializer) checkInBackground(ctx context.Context) *backgroundChecks {
	bg := &backgroundChecks{m: m, ctx: ctx, results: make(chan checkResult, len(m.checks)), running: map[int32]bool{}}
	bg.pctx, bg.cancel = context.WithCancel(ctx)
	cctx := context.WithoutCancel(ctx)
	for p, check := range m.checks {
		bg.running[p] = true
		go func() {
			bg.results <- checkResult{p, check(cctx)}
			bg.mu.Lock()
			bg.cancel()
			bg.mu.Unlock()
		}()
	}
	clear(m.checks)
	m.cfg.Tail.Log.Info("reading while the restored checkpoints are checked", "partitions", slices.Sorted(maps.Keys(bg.running)))
	return bg
}

// pollContext is the context of the next poll.
func (bg *backgroundChecks) pollContext() context.Context {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if len(bg.running) == 0 {
		return bg.ctx
	}
	if bg.pctx.Err() != nil {
		bg.pctx, bg.cancel = context.WithCancel(bg.ctx)
	}
	return bg.pctx
}

// collect takes the results of the checks that ended; a partition whose
// check failed is dropped, and collect answers errRebuild.
func (bg *backgroundChecks) collect() error {
	rebuild := false
	for {
		select {
		case r := <-bg.results:
			if err := bg.done(r); err != nil {
				return err
			}
			rebuild = rebuild || r.err != nil
		default:
			if rebuild {
				return errRebuild
			}
			return nil
		}
	}
}

// done handles one check's result.
func (bg *backgroundChecks) done(r checkResult) error {
	bg.mu.Lock()
	delete(bg.running, r.p)
	bg.mu.Unlock()
	if r.err == nil {
		bg.m.cfg.Tail.Log.Info("the restored checkpoint passed its check", "partition", r.p)
		return nil
	}
	return bg.m.dropCorrupt(r.p, r.err)
}

// finish waits for the checks still running when a run ends, and drops
// the partitions whose check failed; err is the run's. A run that ends
// without its context ending then answers errRebuild, so that Run
// rebuilds them.
func (bg *backgroundChecks) finish(ctx context.Context, err error) error {
	bg.mu.Lock()
	bg.cancel()
	n := len(bg.running)
	bg.mu.Unlock()
	rebuild := false
	for range n {
		r := <-bg.results
		if derr := bg.done(r); derr != nil && err == nil {
			err = derr
		}
		rebuild = rebuild || r.err != nil
	}
	if rebuild && ctx.Err() == nil && (err == nil || !errors.Is(err, errRebuild)) {
		return errors.Join(errRebuild, err)
	}
	return err
}

// startCheck starts check in the background and returns what waits for
// its result.
func startCheck(ctx context.Context, check func(context.Context) error) func(context.Context) error {
	res := make(chan error, 1)
	go func() { res <- check(context.WithoutCancel(ctx)) }()
	var once sync.Once
	var err error
	return func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		once.Do(func() { err = <-res })
		return err
	}
}

// checked waits for the checks of the checkpoints restored unchecked. A
// partition whose checkpoint turned out corrupt is dropped, and run
// answers errRebuild: it is rebuilt from the changelog.
func (m *Materializer) checked(ctx context.Context) error {
	rebuild := false
	for p, check := range m.checks {
		err := check(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		delete(m.checks, p)
		if err == nil {
			continue
		}
		if derr := m.dropCorrupt(p, err); derr != nil {
			return derr
		}
		rebuild = true
	}
	if rebuild {
		return errRebuild
	}
	return nil
}

// open starts the tail at from, and canon.rejected where the sink holds it.
func (m *Materializer) open(from map[int32]int64) error {
	m.Close()
	tcfg := m.cfg.Tail
	tcfg.Start, tcfg.FromStart = from, false
	if m.cfg.Rejections {
		rs := m.cfg.Sink.(RejectionSink)
		m.rejected = map[int32]int64{}
		for rp := range tcfg.RejectedPartitions {
			o, _, err := rs.RejectedOffset(rp)
			if err != nil {
				return err
			}
			m.rejected[rp] = o
		}
		tcfg.RejectedStart = maps.Clone(m.rejected)
	}
	tail, err := New(tcfg)
	if err != nil {
		return err
	}
	m.tail = tail
	return nil
}

// reached reports whether every partition's position is at its target.
func (m *Materializer) reached() bool {
	for p, ps := range m.parts {
		if m.next(p) < ps.target {
			return false
		}
	}
	return true
}

// next is the position of partition p: the tail's, or the sink's before
// the tail read anything; a LastStable policy stops at its target.
func (m *Materializer) next(p int32) int64 {
	ps := m.parts[p]
	next := ps.applied
	if m.tail != nil {
		if n, ok := m.tail.Next(m.cfg.Tail.Topics.Versions, p); ok {
			next = n
		}
	}
	if m.cfg.Until == LastStable {
		next = min(next, ps.target)
	}
	return next
}

// admin is the client offsets are listed with.
func (m *Materializer) admin() *kadm.Client {
	if m.cfg.Admin != nil {
		return kadm.NewClient(m.cfg.Admin)
	}
	return kadm.NewClient(m.tail.Client())
}

// offsets lists the start and last stable offsets of the partitions. A
// follower waits for the cluster; the bounded policies return the error.
func (m *Materializer) offsets(ctx context.Context) (first, stable map[int32]int64, err error) {
	topic := m.cfg.Tail.Topics.Versions
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var starts, ends kadm.ListedOffsets
		if starts, err = m.admin().ListStartOffsets(lctx, topic); err != nil {
			err = fmt.Errorf("list start offsets of %s: %w", topic, err)
		} else if ends, err = m.admin().ListCommittedOffsets(lctx, topic); err != nil { // last stable offsets
			err = fmt.Errorf("list last stable offsets of %s: %w", topic, err)
		}
		cancel()
		if err == nil {
			first, stable = map[int32]int64{}, map[int32]int64{}
			for _, p := range m.cfg.Tail.Partitions {
				so, ok := starts.Lookup(topic, p)
				eo, ok2 := ends.Lookup(topic, p)
				if !ok || !ok2 || so.Err != nil || eo.Err != nil {
					return nil, nil, fmt.Errorf("offsets of %s[%d] unavailable: %w", topic, p, errors.Join(so.Err, eo.Err))
				}
				first[p], stable[p] = so.Offset, eo.Offset
			}
			return first, stable, nil
		}
		if m.cfg.Until != Forever || ctx.Err() != nil {
			return nil, nil, err
		}
		m.cfg.Tail.Log.Warn("list the offsets of the changelog; retrying", "topic", topic, "err", err)
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// ends lists the end offsets (high watermarks) of the partitions.
func (m *Materializer) ends(ctx context.Context) (map[int32]int64, error) {
	topic := m.cfg.Tail.Topics.Versions
	ends, err := m.admin().ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, p := range m.cfg.Tail.Partitions {
		o, ok := ends.Lookup(topic, p)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("end offset of %s[%d] unavailable: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// Take applies records the tail polled by the decision table and writes
// what it took: up to the target with LastStable, everything otherwise.
// Run calls it; a caller that polls the tail itself after a bounded Run
// calls it too. A partition dropped for a rebuild is an error there.
func (m *Materializer) Take(evs []Event) error {
	topic := m.cfg.Tail.Topics.Versions
	var rejs map[int32][]*schemas.Rejected
	for _, ev := range evs {
		if ev.Topic != topic {
			if ev.Topic == m.cfg.Tail.Topics.Rejected && m.cfg.Rejections {
				// Records that do not decode name no mutation to ask for.
				if r := ev.Rejected; r != nil && r.Mutation != nil && m.parts[m.cfg.Sink.(RejectionSink).PartitionOf(r.Mutation.Org, r.Mutation.Project)] != nil {
					if rejs == nil {
						rejs = map[int32][]*schemas.Rejected{}
					}
					rejs[ev.Partition] = append(rejs[ev.Partition], r)
				}
			}
			continue
		}
		ps := m.parts[ev.Partition]
		if ps == nil || (m.cfg.Until == LastStable && ev.Offset >= ps.target) {
			continue
		}
		switch {
		case errors.Is(ev.Err, schemas.ErrNewerSchema):
			return fmt.Errorf("changelog record %s[%d]@%d: %w", topic, ev.Partition, ev.Offset, ev.Err)
		case ev.Err != nil:
			m.skip(ev.Partition, ev.Offset, ev.Err)
		case ev.Chunk != nil || ev.Version != nil || ev.Deploy != nil:
			ps.recs = append(ps.recs, store.Record{Chunk: ev.Chunk, Version: ev.Version, Deploy: ev.Deploy})
			ps.offsets = append(ps.offsets, ev.Offset)
			if m.cfg.Hooks.Wrote != nil {
				ps.evs = append(ps.evs, ev)
			}
			ps.bytes += int64(ev.Size)
			if len(ps.recs) >= m.cfg.Batch {
				if err := m.write(ev.Partition, ev.Offset+1); err != nil {
					return err
				}
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(m.parts)) {
		next := m.next(p)
		if m.cfg.Until != Forever && next < m.parts[p].target && len(m.parts[p].recs) < m.cfg.Batch {
			continue // batched until the target
		}
		if err := m.write(p, next); err != nil {
			return err
		}
	}
	for rp, at := range m.rejected {
		if next, ok := m.tail.Next(m.cfg.Tail.Topics.Rejected, rp); ok && next > at {
			if err := m.cfg.Sink.(RejectionSink).RecordRejections(rejs[rp], rp, next); err != nil {
				return err
			}
			m.rejected[rp] = next
		}
	}
	return nil
}

// write writes partition p's pending records to the sink with the offset
// after them. A refusal from the first record means foreign records,
// skipped one by one; otherwise the partition is dropped (errRebuild).
func (m *Materializer) write(p int32, next int64) error {
	ps := m.parts[p]
	if len(ps.recs) == 0 && next <= ps.applied {
		return nil
	}
	from, whole := ps.applied, true
	err := m.cfg.Sink.Apply(p, ps.recs, next)
	if err != nil && store.Refused(err) {
		whole = false
		if !ps.fromStart {
			m.cfg.Tail.Log.Warn("dropping the partition's local state and rebuilding it from the changelog", "partition", p, "err", err)
			if derr := m.drop(p, err); derr != nil {
				return derr
			}
			return fmt.Errorf("%w: partition %d: %w", errRebuild, p, err)
		}
		// Apply wrote nothing: the records one by one.
		for i := range ps.recs {
			if err := m.cfg.Sink.Apply(p, ps.recs[i:i+1], ps.offsets[i]+1); err != nil {
				if !store.Refused(err) {
					return err
				}
				m.skip(p, ps.offsets[i], err)
			}
		}
		err = m.cfg.Sink.Apply(p, nil, next)
	}
	if err != nil {
		return err
	}
	n, bytes := len(ps.recs), ps.bytes
	evs := ps.evs
	ps.recs, ps.offsets, ps.evs, ps.bytes = ps.recs[:0], ps.offsets[:0], nil, 0
	ps.applied = max(ps.applied, next)
	if m.cfg.Hooks.Wrote != nil && whole {
		m.cfg.Hooks.Wrote(p, from, evs, next)
	}
	if m.cfg.Hooks.Applied != nil {
		m.cfg.Hooks.Applied(p, next, n, bytes)
	}
	return nil
}

// restoreCheckpoints restores from checkpoints the partitions whose sink
// holds nothing, or much less than a checkpoint, and moves their start
// offsets there. A bucket that cannot be read is logged: the partitions
// are then read from what the sink holds, slower but correct. It
// reports whether it restored any.
func (m *Materializer) restoreCheckpoints(ctx context.Context, from map[int32]int64, stored map[int32]bool, stable map[int32]int64) (restored bool, err error) {
	if m.cfg.Checkpoints == nil {
		return false, nil
	}
	log := m.cfg.Tail.Log
	for _, p := range m.cfg.Tail.Partitions {
		if m.noCheckpoint[p] {
			continue
		}
		after := int64(-1)
		if stored[p] && from[p] <= stable[p] {
			if stable[p]-from[p] <= m.cfg.CheckpointGain {
				continue // the tail is short: read it
			}
			after = from[p] + m.cfg.CheckpointGain
		}
		if m.topicID == "" {
			id, err := TopicID(ctx, m.admin(), m.cfg.Tail.Topics.Versions)
			if err != nil {
				log.Warn("cannot read the changelog's topic id: restoring without checkpoints", "err", err)
				return restored, nil
			}
			m.topicID = id
		}
		var o int64
		var ok bool
		var check func(context.Context) error
		if u, can := m.cfg.Checkpoints.(UncheckedCheckpoints); can {
			o, ok, check, err = u.RestoreUnchecked(ctx, p, m.topicID, after, stable[p])
		} else {
			o, ok, err = m.cfg.Checkpoints.Restore(ctx, p, m.topicID, after, stable[p])
		}
		if check != nil {
			if m.cfg.Until != Forever && m.cfg.Hooks.Checking == nil {
				// Waited for before Run returns: it runs beside the
				// tail meanwhile.
				check = startCheck(ctx, check)
			}
			m.checks[p] = check
		}
		switch {
		case ctx.Err() != nil:
			return restored, ctx.Err()
		case err != nil:
			log.Warn("cannot read checkpoints: restoring the partition from the changelog", "partition", p, "err", err)
			continue
		case !ok:
			log.Debug("no usable checkpoint: restoring the partition from the changelog", "partition", p, "from", from[p])
			continue
		}
		from[p], stored[p], restored = o, true, true
		if m.cfg.Hooks.Restored != nil {
			m.cfg.Hooks.Restored(p, o)
		}
	}
	return restored, nil
}

// TopicID returns the Kafka topic id of topic, in hex: the incarnation
// of the changelog, which a recreated topic changes.
func TopicID(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return "", fmt.Errorf("describe %s: %w", topic, errors.Join(errors.New("topic not found"), td.Err))
	}
	return hex.EncodeToString(td.ID[:]), nil
}

// drop drops partition p from the sink for a rebuild from the
// changelog's first record.
func (m *Materializer) drop(p int32, why error) error {
	m.noCheckpoint[p] = true
	return m.dropOnly(p, why)
}

// dropCorrupt logs that partition p's restored checkpoint failed its
// check, and drops the partition for a restore that may use an older
// checkpoint: the UncheckedCheckpoints never restore that one again.
func (m *Materializer) dropCorrupt(p int32, err error) error {
	m.cfg.Tail.Log.Error("a restored checkpoint is corrupt: dropping the partition and restoring it again, from an older checkpoint or the changelog", "partition", p, "err", err)
	return m.dropOnly(p, fmt.Errorf("%w: %w", ErrCorruptCheckpoint, err))
}

func (m *Materializer) dropOnly(p int32, why error) error {
	if check := m.checks[p]; check != nil {
		// What it checks is dropped; run it all the same, which
		// releases what it holds.
		go func() { _ = check(context.Background()) }()
		delete(m.checks, p)
	}
	if err := m.cfg.Sink.DropPartition(p); err != nil {
		return err
	}
	if m.cfg.Hooks.Dropped != nil {
		m.cfg.Hooks.Dropped(p, why)
	}
	return nil
}

// skip reports a changelog record that no sequencer wrote.
func (m *Materializer) skip(p int32, offset int64, err error) {
	m.cfg.Tail.Log.Error("skipping a record of the changelog that no sequencer wrote: it does not decode or does not follow the versions before it; find out who produces to the topic",
		"topic", m.cfg.Tail.Topics.Versions, "partition", p, "offset", offset, "err", err)
	if m.cfg.Hooks.Skipped != nil {
		m.cfg.Hooks.Skipped(p, offset, err)
	}
}
