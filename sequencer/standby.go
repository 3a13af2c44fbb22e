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
// The group's assignment does not know of the standbys yet (the
// cooperative-sticky balancer): a partition whose owner dies goes to
// whichever instance the balancer picks, warm or not.

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
					s.m.standbyLag.WithLabelValues(partitionLabel(p)).Set(float64(max(0, t-from[p])))
				}
			},
			Applied: func(p int32, next int64, _ int, _ int64) {
				s.m.standbyLag.WithLabelValues(partitionLabel(p)).Set(float64(max(0, targets[p]-next)))
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
