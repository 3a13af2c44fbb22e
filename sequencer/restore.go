package sequencer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	chlog "github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/schemas"
)

// restorePending restores every owned partition that needs it. Fetching
// of an input partition is paused from its first restore attempt until its
// restore succeeds, so no poll returns its records before; the other
// partitions go on meanwhile. A failed restore is tried again after
// restoreRetry. It returns the partitions still waiting, and why the
// attempts made now failed. It runs in the poll loop, never in a
// rebalance callback: a restore may take long.
func (s *Sequencer) restorePending(ctx context.Context, cl *kgo.Client) (waiting map[int32]bool, err error) {
	pending := s.pendingRestores()
	if len(pending) == 0 {
		return nil, nil
	}
	topic := s.cfg.Topics.Mutations
	ps := slices.Sorted(maps.Keys(pending))
	cl.PauseFetchPartitions(map[string][]int32{topic: ps})
	// A standby follower of a partition now owned stops writing it first.
	if err := s.waitStandbys(ctx); err != nil {
		return pending2set(pending), err
	}
	waiting = map[int32]bool{}
	var errs []error
	var done []int32
	for _, p := range ps {
		if time.Now().Before(s.nextTry[p]) {
			waiting[p] = true
			continue
		}
		if err := s.restore(ctx, cl, p, pending[p]); err != nil {
			waiting[p] = true
			s.nextTry[p] = time.Now().Add(restoreRetry)
			errs = append(errs, fmt.Errorf("restore partition %d: %w", p, err))
			continue
		}
		delete(s.nextTry, p)
		if s.markedSince(p, pending[p]) {
			// Marked again while it was restored (its checkpoint
			// failed its check): it stays paused for the next restore.
			waiting[p] = true
			continue
		}
		done = append(done, p)
	}
	// Resume the restored partitions in one call, not each after its
	// restore: the client keeps one fetch per broker in flight, and a
	// partition resumed while that fetch waits for records of the others
	// is fetched only when it returns, after FetchMaxWait. Resuming one by
	// one left every partition but the first idle for that long after each
	// start, while Ready already said yes. They count as restored (Ready)
	// only once they are fetched again.
	if len(done) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{topic: done})
	}
	for _, p := range done {
		s.restored(p, pending[p])
	}
	return waiting, errors.Join(errs...)
}

// setRestoreLag notes how many changelog records partition p's restore
// has left, for Ready; -1 forgets it.
func (s *Sequencer) setRestoreLag(p int32, lag int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lag < 0 {
		delete(s.restoreLags, p)
		return
	}
	s.restoreLags[p] = lag
}

func pending2set(pending map[int32]uint64) map[int32]bool {
	out := make(map[int32]bool, len(pending))
	for p := range pending {
		out[p] = true
	}
	return out
}

// errOpenTransaction means that canon.versions[p] holds records of a
// transaction that has not ended. It is not this instance's (a restore
// runs between its transactions), so it is a previous owner's: one that
// lost the group after committing its input offsets in the transaction
// (KIP-447 lets it commit after a rebalance: the new owner's offset fetch
// waits for it), or one whose commit markers are still being written. Its
// versions would be missing from a store restored up to the last stable
// offset, and deciding over that store would publish their version
// numbers twice. The restore waits until the transaction ends, at most the
// transaction timeout.
var errOpenTransaction = errors.New("a transaction on the changelog partition has not ended")

// restore brings the store's partition p up to the last stable offset of
// canon.versions[p], by changelog's decision table (a store the changelog
// cannot explain is dropped and rebuilt, never "recovered"); gen is the
// mark generation of the restore. The check of a checkpoint it restores
// from a local bucket goes on after it returns (checks.go).
func (s *Sequencer) restore(ctx context.Context, cl *kgo.Client, p int32, gen uint64) error {
	start := time.Now()
	if err := s.prepareRestore(ctx, p); err != nil {
		return err
	}
	topic := s.cfg.Topics.Versions
	end, high, err := s.changelogOffsets(ctx, cl, p)
	if err != nil {
		return err
	}
	if high > end {
		// A transaction of a gone instance would hold the partition until
		// the broker's transaction timeout: fence it, then look again.
		fenced, ferr := s.fenceAbandoned(ctx, cl, p)
		if ferr != nil {
			s.log.Warn("cannot fence the open transaction on the changelog; waiting for it to end", "partition", p, "err", ferr)
		}
		if fenced {
			if end, high, err = s.changelogOffsets(ctx, cl, p); err != nil {
				return err
			}
		}
	}
	if high > end {
		return fmt.Errorf("%w: %s[%d] has records up to offset %d, its last stable offset is %d",
			errOpenTransaction, topic, p, high, end)
	}

	label := partitionLabel(p)
	defer s.m.restoreLag.WithLabelValues(label).Set(0)
	defer s.setRestoreLag(p, -1)
	var from, to, records, bytes int64
	checkpointAt := int64(-1)
	// Skipped records are counted once the restore is done: the records a
	// pass skipped before its partition was dropped are read, and
	// skipped, again by the rebuild.
	var skipped float64
	m, err := chlog.NewMaterializer(chlog.MaterializerConfig{
		Tail: chlog.Config{Kafka: s.cfg.Kafka.Aux("restore"), Topics: s.cfg.Topics, Partitions: []int32{p},
			Limits: s.cfg.Limits, Log: s.log},
		Sink: s.cfg.Store, Until: chlog.LastStable, Batch: s.cfg.RestoreBatch, Admin: cl,
		Checkpoints: s.cfg.Checkpoints,
		Hooks: chlog.Hooks{
			Restored: func(_ int32, o int64) { checkpointAt = o },
			Started: func(f, t map[int32]int64) {
				from, to = f[p], t[p]
				s.m.restoreLag.WithLabelValues(label).Set(float64(to - from))
				s.setRestoreLag(p, to-from)
			},
			Applied: func(_ int32, next int64, n int, b int64) {
				records, bytes = records+int64(n), bytes+b
				s.m.restoreRecords.Add(float64(n))
				s.m.restoreBytes.Add(float64(b))
				s.m.restoreLag.WithLabelValues(label).Set(float64(to - next))
				s.setRestoreLag(p, to-next)
			},
			Skipped: func(int32, int64, error) { skipped++ },
			Dropped: func(_ int32, err error) {
				skipped = 0
				if errors.Is(err, chlog.ErrCorruptCheckpoint) {
					s.m.checksFailed.Inc() // found by the restore itself
				}
			},
			// Whatever happens next, the check runs: a restore that
			// fails after it waits for it (prepareRestore).
			Checking: func(_ int32, check func(context.Context) error) { s.checkRestored(ctx, p, gen, check) },
		},
	})
	if err != nil {
		return err
	}
	err = m.Run(ctx)
	m.Close()
	s.m.changelogSkipped.Add(skipped)
	if err != nil {
		if storeCorrupt(err) {
			// Reading the tail over the partition's state failed on
			// corrupt data: the next attempt starts from elsewhere.
			s.mu.Lock()
			s.corrupt[p] = true
			s.mu.Unlock()
		}
		return err
	}
	if err := s.noteDecided(ctx, cl, p); err != nil {
		return err
	}
	delete(s.warned, p)
	d := time.Since(start)
	s.m.restoreSeconds.Observe(d.Seconds())
	s.log.Info("partition restored", "partition", p, "from", from, "to", to, "records", records, "bytes", bytes,
		"checkpoint", checkpointAt, "checking", s.checkRunning(p), "took", d)
	return nil
}

// changelogOffsets returns the last stable offset and the high watermark
// of canon.versions[p]; the high watermark is beyond the last stable
// offset while a transaction is open.
func (s *Sequencer) changelogOffsets(ctx context.Context, cl *kgo.Client, p int32) (end, high int64, err error) {
	adm := kadm.NewClient(cl)
	topic := s.cfg.Topics.Versions
	ends, err := adm.ListCommittedOffsets(ctx, topic) // last stable offsets
	if err != nil {
		return 0, 0, fmt.Errorf("list last stable offsets of %s: %w", topic, err)
	}
	highs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	eo, ok := ends.Lookup(topic, p)
	ho, ok2 := highs.Lookup(topic, p)
	if !ok || !ok2 || eo.Err != nil || ho.Err != nil {
		return 0, 0, fmt.Errorf("offsets of %s[%d] unavailable: %w", topic, p, errors.Join(eo.Err, ho.Err))
	}
	return eo.Offset, ho.Offset, nil
}

// noteDecided notes, after a restore, the highest offset of p's input
// that was decided before: the source of the last version the store
// holds, or of the last rejection in canon.rejected, whichever is higher.
// Records at or below it are never decided again (see skipDecided).
//
// The group's committed offset cannot say it: an operator may have moved
// it back, and the restore starts when the partition is assigned, while
// the client may still be fetching the committed offsets (franz-go calls
// OnPartitionsAssigned first). Duplicates leave no trace, but deciding one
// again gives a duplicate again: a client's last id never goes down.
func (s *Sequencer) noteDecided(ctx context.Context, cl *kgo.Client, p int32) error {
	last, ok, err := s.lastSource(p)
	if err != nil {
		return fmt.Errorf("read the last version's source offset: %w", err)
	}
	rej, rok, err := s.lastRejectedSource(ctx, cl, p)
	if err != nil {
		return err
	}
	switch {
	case ok && rok:
		s.decidedUpTo[p] = max(last, rej)
	case ok:
		s.decidedUpTo[p] = last
	case rok:
		s.decidedUpTo[p] = rej
	default:
		delete(s.decidedUpTo, p)
	}
	return nil
}

// skipDecided drops from recs the records of an input partition at or
// below its highest offset decided before, which a consumer group whose
// offsets were moved back (reset, deleted) polls again. Deciding them
// again against today's state would change history: a gap record would
// become a version, a write rejected for a missing branch would apply,
// and a client's next id would then be answered duplicate. The offsets
// of the dropped records are committed with the transaction.
func (s *Sequencer) skipDecided(recs []*kgo.Record) []*kgo.Record {
	if len(s.decidedUpTo) == 0 {
		return recs
	}
	out := recs[:0:0]
	for i, r := range recs {
		upTo, ok := s.decidedUpTo[r.Partition]
		if !ok || r.Offset > upTo {
			if out != nil {
				out = append(out, r)
			}
			continue
		}
		if out == nil {
			out = append(make([]*kgo.Record, 0, len(recs)), recs[:i]...)
		}
		s.m.inputSkipped.Inc()
		if !s.warned[r.Partition] {
			s.warned[r.Partition] = true
			s.m.offsetBehind.Inc()
			s.log.Warn("the group's committed input offset is behind what was decided: its offsets were reset or deleted; "+
				"the records up to the last decided one are skipped, never decided again, and the ones after it are decided",
				"partition", r.Partition, "resumed_at", r.Offset, "decided_up_to", upTo)
		}
	}
	if out == nil {
		return recs
	}
	return out
}

// lastRejectedSource is the highest offset of input partition p that
// canon.rejected holds a rejection of, read_committed. Rejections of p
// go to partition p modulo the topic's partition count, which it shares
// with no other input partition when the counts are equal (Canon creates
// them so); the partition is read backwards in growing windows from its
// last stable offset until one is found.
func (s *Sequencer) lastRejectedSource(ctx context.Context, cl *kgo.Client, p int32) (int64, bool, error) {
	topic := s.cfg.Topics.Rejected
	q := p % s.rejectedPartitions
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, false, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, false, fmt.Errorf("list last stable offsets of %s: %w", topic, err)
	}
	so, ok := starts.Lookup(topic, q)
	eo, ok2 := ends.Lookup(topic, q)
	if !ok || !ok2 || so.Err != nil || eo.Err != nil {
		return 0, false, fmt.Errorf("offsets of %s[%d] unavailable: %w", topic, q, errors.Join(so.Err, eo.Err))
	}
	last, found := int64(-1), false
	window := int64(256)
	for hi := eo.Offset; hi > so.Offset && !found; window *= 4 {
		from := max(so.Offset, hi-window)
		err := s.readRange(ctx, topic, q, from, hi, func(r *kgo.Record) {
			rej, err := schemas.DecodeRejected(header(r, schemas.HeaderSchema), r.Value, s.cfg.Limits)
			if err != nil || rej.Topic != s.cfg.Topics.Mutations || rej.Partition != p {
				return // the projector's, or another input partition's
			}
			last, found = max(last, rej.Offset), true
		})
		if err != nil {
			return 0, false, err
		}
		hi = from
	}
	return last, found, nil
}

// readRange calls fn with every committed data record of topic[p] from
// offset `from` up to `end`, a last stable offset.
func (s *Sequencer) readRange(ctx context.Context, topic string, p int32, from, end int64, fn func(*kgo.Record)) error {
	cl, err := s.cfg.Kafka.Aux("restore").NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Commit markers tell the position exactly: end may follow one.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s[%d] at %d: %w", topic, p, next, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end {
				return
			}
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}

// lastSource is the highest source offset of the versions the store holds
// for partition p.
func (s *Sequencer) lastSource(p int32) (int64, bool, error) {
	if last, ok, err := s.cfg.Store.LastSource(p); err != nil || ok {
		return last, ok, err
	}
	// A store written before it kept the last source offset: scan.
	projects, err := s.cfg.Store.Projects(p)
	if err != nil {
		return 0, false, err
	}
	last, found := int64(-1), false
	for _, pr := range projects {
		branches, err := s.cfg.Store.Branches(pr.Org, pr.Project)
		if err != nil {
			return 0, false, err
		}
		for _, b := range branches {
			vs, err := s.cfg.Store.Versions(pr.Org, pr.Project, b.Name, b.Version, 1)
			if err != nil {
				return 0, false, err
			}
			if len(vs) == 1 && vs[0].Source.Offset > last {
				last, found = vs[0].Source.Offset, true
			}
		}
	}
	return last, found, nil
}
