package sequencer

import (
	"context"
	"errors"
	"slices"
	"time"

	chlog "github.com/canon-sync/canon/internal/changelog"
)

// Warm standbys (Config.Standbys): the instance follows the changelog of
// up to Standbys partitions it does not own into its store, as a read
// replica does, so that when one of them is assigned to it the restore
// reads only the tail since. The set is the partitions it does not own,
// nearest after its own first (by partition number, wrapping): with two
// instances and Standbys at least the other's share, each keeps every
// partition of the other warm. A partition leaves the set, and its
// follower stops writing it, before the sequencer restores it.
//
// The group's balancer (balancer.go) gives a partition that has to move
// to the instance with room whose copy is the most caught up, so a dead
// owner's partitions go to their standbys.

// standbySetLocked is the standby partitions for the owned ones; s.mu is
// held.
func (s *Sequencer) standbySetLocked() []int32 {
	n := s.partitions
	if s.cfg.Standbys <= 0 || n <= 0 || !s.joined {
		return nil
	}
	base := int32(0)
	if len(s.owned) > 0 {
		base = n
		for p := range s.owned {
			base = min(base, p)
		}
	}
	var out []int32
	for i := range n {
		p := (base + i) % n
		if !s.owned[p] {
			out = append(out, p)
		}
		if len(out) == s.cfg.Standbys {
			break
		}
	}
	slices.Sort(out)
	return out
}

// standbyChangedLocked tells the standby loop that the owned partitions
// changed; s.mu is held. It returns the generation the loop must reach
// for the change to be applied.
func (s *Sequencer) standbyChangedLocked() uint64 {
	s.ownGen++
	select {
	case s.standbyWake <- struct{}{}:
	default:
	}
	return s.ownGen
}

// waitStandbys waits until the standby loop follows no partition that is
// owned now: a restore must not run while a follower writes the same
// partition.
func (s *Sequencer) waitStandbys(ctx context.Context) error {
	if s.cfg.Standbys <= 0 {
		return nil
	}
	s.mu.Lock()
	gen := s.ownGen
	s.mu.Unlock()
	for {
		s.standbyMu.Lock()
		applied, ch := s.standbyGen, s.standbyDone
		s.standbyMu.Unlock()
		if applied >= gen {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (s *Sequencer) standbyApplied(gen uint64) {
	s.standbyMu.Lock()
	defer s.standbyMu.Unlock()
	if gen > s.standbyGen {
		s.standbyGen = gen
		close(s.standbyDone)
		s.standbyDone = make(chan struct{})
	}
}

// runStandbys follows the standby partitions until ctx ends, restarting
// its materializer whenever the set changes.
func (s *Sequencer) runStandbys(ctx context.Context) {
	var (
		cur    []int32
		cancel context.CancelFunc = func() {}
		done   chan error
	)
	stop := func() {
		cancel()
		if done != nil {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				s.log.Warn("standby follower stopped", "partitions", cur, "err", err)
			}
			done = nil
		}
		for _, p := range cur {
			s.m.standbyLag.DeleteLabelValues(partitionLabel(p))
		}
		s.standbyMu.Lock()
		clear(s.standbyLags)
		clear(s.standbyMeasured)
		s.standbyMu.Unlock()
		s.m.standbys.Set(0)
	}
	defer stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		s.mu.Lock()
		gen, want := s.ownGen, s.standbySetLocked()
		s.mu.Unlock()
		if !slices.Equal(want, cur) || done == nil && len(want) > 0 {
			stop()
			cur = want
			if len(cur) > 0 {
				cancel, done = s.startFollower(ctx, cur)
				s.m.standbys.Set(float64(len(cur)))
				s.log.Info("following standby partitions", "partitions", cur)
			}
		}
		s.standbyApplied(gen)
		select {
		case <-ctx.Done():
			return
		case <-s.standbyWake:
		case err := <-done:
			// The follower failed (not stopped: stop waits for it).
			done = nil
			s.log.Warn("standby follower failed; trying again", "partitions", cur, "err", err)
			retry.Reset(restoreRetry)
			select {
			case <-ctx.Done():
				return
			case <-retry.C:
			case <-s.standbyWake:
			}
		}
	}
}

// startFollower runs follow on ps until cancel; done gets its end.
func (s *Sequencer) startFollower(ctx context.Context, ps []int32) (cancel context.CancelFunc, done chan error) {
	fctx, cancel := context.WithCancel(ctx)
	done = make(chan error, 1)
	go func() { done <- s.follow(fctx, ps) }()
	return cancel, done
}

// follow materializes partitions ps into the store, forever.
func (s *Sequencer) follow(ctx context.Context, ps []int32) error {
	targets := map[int32]int64{}
	m, err := chlog.NewMaterializer(chlog.MaterializerConfig{
		Tail: chlog.Config{Kafka: s.cfg.Kafka.Aux("standby"), Topics: s.cfg.Topics, Partitions: ps,
			Limits: s.cfg.Limits, Log: s.log},
		Sink: s.cfg.Store, Until: chlog.Forever, Batch: s.cfg.RestoreBatch,
		Checkpoints: s.cfg.Checkpoints,
		Hooks: chlog.Hooks{
			Started: func(from, to map[int32]int64) {
				for p, t := range to {
					targets[p] = t
					s.noteStandbyLag(p, max(0, t-from[p]), false)
				}
			},
			Applied: func(p int32, next int64, _ int, _ int64) {
				// Until the first measurement of the LagWatch: the
				// distance to the last stable offset at the start.
				s.noteStandbyLag(p, max(0, targets[p]-next), false)
			},
			Dropped: func(_ int32, err error) {
				if errors.Is(err, chlog.ErrCorruptCheckpoint) {
					s.m.checksFailed.Inc()
				}
			},
		},
	})
	if err != nil {
		return err
	}
	defer m.Close()
	err = m.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// noteStandbyLag records how far the copy of standby partition p is
// behind, for the metric and Lags: measured by the LagWatch, or, until it
// has measured p, the follower's distance to its start's offsets.
func (s *Sequencer) noteStandbyLag(p int32, records int64, measured bool) {
	s.standbyMu.Lock()
	defer s.standbyMu.Unlock()
	if s.standbyLags == nil {
		s.standbyLags, s.standbyMeasured = map[int32]int64{}, map[int32]bool{}
	}
	if measured {
		s.standbyMeasured[p] = true
	} else if s.standbyMeasured[p] {
		return
	}
	s.standbyLags[p] = records
	s.m.standbyLag.WithLabelValues(partitionLabel(p)).Set(float64(records))
}

// standbyLagWatch measures the standby copies' lag against the
// changelog's last stable offsets as they are now (the follower's own
// figure is against the offsets at its start, and stays 0 once it has
// reached them, however far the changelog moves on).
func (s *Sequencer) standbyLagWatch() *chlog.LagWatch {
	return &chlog.LagWatch{
		Kafka: s.cfg.Kafka, Topic: s.cfg.Topics.Versions, Log: s.log,
		Partitions: func() []int32 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.standbySetLocked()
		},
		Offset: s.cfg.Store.Offset,
		Report: func(lags map[int32]int64) {
			s.mu.Lock()
			want := s.standbySetLocked()
			s.mu.Unlock()
			for p, n := range lags {
				if slices.Contains(want, p) {
					s.noteStandbyLag(p, n, true)
				}
			}
		},
	}
}

// Lags returns the lag of every copy of a changelog partition the
// instance holds for a reason: each owned partition (what its restore has
// left, 0 once restored) and each standby (behind the last stable
// offset), in order of partition. -1 is not measured yet.
func (s *Sequencer) Lags() []PartitionLag {
	if !s.running.Load() {
		return nil
	}
	s.mu.Lock()
	var out []PartitionLag
	for p := range s.owned {
		lag := int64(0)
		if _, restoring := s.needRestore[p]; restoring {
			lag = -1
			if n, ok := s.restoreLags[p]; ok {
				lag = n
			}
		}
		out = append(out, PartitionLag{Role: RoleOwner, Partition: p, Records: lag})
	}
	standbys := s.standbySetLocked()
	s.mu.Unlock()
	s.standbyMu.Lock()
	for _, p := range standbys {
		lag, ok := s.standbyLags[p]
		if !ok {
			lag = -1
		}
		out = append(out, PartitionLag{Role: RoleStandby, Partition: p, Records: lag})
	}
	s.standbyMu.Unlock()
	slices.SortFunc(out, func(a, b PartitionLag) int { return int(a.Partition - b.Partition) })
	return out
}

// PartitionLag is one copy's lag (see Lags).
type PartitionLag struct {
	Role      string
	Partition int32
	// Records is the changelog offsets the copy has left to apply.
	Records int64
}

// Roles of PartitionLag.
const (
	RoleOwner   = "owner"
	RoleStandby = "standby"
)
