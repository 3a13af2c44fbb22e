package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Defaults of RunnerConfig.
const (
	// DefaultEvery is how many changelog records a partition advances
	// before its owner takes a checkpoint.
	DefaultEvery = 100_000
	// DefaultInterval is the longest a partition that changed goes
	// without a checkpoint.
	DefaultInterval = 10 * time.Minute
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Bucket *Bucket
	// Every is how many changelog offsets a partition advances between
	// two checkpoints; DefaultEvery when 0.
	Every int64
	// Interval is the longest a partition that advanced waits for its
	// next checkpoint; DefaultInterval when 0.
	Interval time.Duration
	// Owned returns the partitions this instance owns and has restored:
	// only an owner checkpoints a partition.
	Owned func() []int32
	// TopicID returns the changelog's incarnation (Kafka topic id, hex).
	TopicID func(ctx context.Context) (string, error)
	// Generation returns the consumer group generation in which this
	// instance owns the partitions Owned returns; its manifests carry it,
	// so that of two checkpoints at the same offset a restore takes the
	// newer owner's. Nil, or -1, when not known.
	Generation func() int32
	Log        *slog.Logger
}

// Runner takes the checkpoints of the partitions an instance owns, every
// Every records or Interval, keeps the bucket by the retention policy,
// and sweeps unreferenced files.
type Runner struct {
	cfg  RunnerConfig
	log  *slog.Logger
	last map[int32]checkpointed
}

type checkpointed struct {
	offset int64
	at     time.Time
}

// NewRunner returns a Runner; Run runs it.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Bucket == nil || cfg.Owned == nil || cfg.TopicID == nil {
		return nil, errors.New("checkpoint: runner needs Bucket, Owned and TopicID")
	}
	if cfg.Every < 0 || cfg.Interval < 0 {
		return nil, errors.New("checkpoint: --checkpoint-every and --checkpoint-interval must not be negative")
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: log.With("component", "checkpoint"), last: map[int32]checkpointed{}}, nil
}

// Run checks the owned partitions until ctx ends. Errors are logged and
// tried again at the next tick: a bucket outage delays checkpoints, it
// stops nothing else.
func (r *Runner) Run(ctx context.Context) error {
	tick := min(max(r.cfg.Interval/10, 100*time.Millisecond), 10*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("checkpoints", "err", err)
		}
	}
}

// Once takes the checkpoints that are due, applies retention and sweeps
// when a sweep is due.
func (r *Runner) Once(ctx context.Context) error {
	k := r.cfg.Bucket
	var errs []error
	var topicID string
	owned := r.cfg.Owned()
	keep := map[int32]bool{}
	for _, p := range owned {
		keep[p] = true
		off, ok, err := k.cfg.Store.Offset(p)
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		last, known := r.last[p]
		if !known {
			m, err := k.Newest(ctx, p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			last = checkpointed{offset: -1, at: time.Now()}
			if m != nil {
				last = checkpointed{offset: m.Offset, at: m.CreatedAt}
			}
			r.last[p] = last
		}
		if off <= last.offset || (off-last.offset < r.cfg.Every && time.Since(last.at) < r.cfg.Interval) {
			continue
		}
		if topicID == "" {
			if topicID, err = r.cfg.TopicID(ctx); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
		gen := int32(-1)
		if r.cfg.Generation != nil {
			gen = r.cfg.Generation()
		}
		m, err := k.Take(ctx, p, TakeOptions{TopicID: topicID, Generation: gen})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m != nil {
			r.last[p] = checkpointed{offset: m.Offset, at: time.Now()}
		}
		if _, err := k.Retain(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	for p := range r.last {
		if !keep[p] {
			delete(r.last, p) // another owner checkpoints it now
		}
	}
	k.state.mu.Lock()
	due := len(owned) > 0 && k.cfg.now().Sub(k.state.lastGC) >= max(k.cfg.Grace/4, time.Second)
	k.state.mu.Unlock()
	if due {
		if _, err := k.Sweep(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
