package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/canon-sync/canon/internal/kafka"
)

// Progress is how far a backfill is.
type Progress struct {
	// Done and Total count records of the versions topic (versions,
	// chunks and transaction markers) between the earliest offsets and the
	// end offsets the backfill started with; Done are committed.
	Done, Total int64
	// Rows are the rows inserted by this run.
	Rows int64
	// Elapsed is the time since the backfill started.
	Elapsed time.Duration
}

// Backfill projects the versions topic from its earliest offset up to its
// end offsets at the start, with cfg.Group, which should be a group of its
// own (a group with commits resumes where it stopped), and returns once
// every partition is committed up to there. report is called every
// interval and once at the end. The projector's rows land in the same
// tables as the live projector's: what both insert collapses.
func Backfill(ctx context.Context, cfg Config, interval time.Duration, report func(Progress)) (Progress, error) {
	if err := cfg.Validate(); err != nil {
		return Progress{}, err
	}
	cfg.defaults()
	t0 := time.Now()
	cl, err := cfg.Kafka.Aux("backfill").NewClient()
	if err != nil {
		return Progress{}, fmt.Errorf("backfill: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := cfg.Topics.Versions
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return Progress{}, fmt.Errorf("backfill: start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return Progress{}, fmt.Errorf("backfill: end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return Progress{}, fmt.Errorf("backfill: end offsets of %s: %w", topic, err)
	}
	prior, err := adm.FetchOffsets(ctx, cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// Kafka answers a group that never committed with no offsets, the
		// embedded broker of `canon dev` (kfake) with this error: both
		// mean the backfill starts from the earliest offsets.
		prior, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return Progress{}, fmt.Errorf("backfill: committed offsets of group %s: %w", cfg.Group, err)
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		to[o.Partition] = o.Offset
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Err == nil {
			from[o.Partition] = s.Offset
		}
	})
	committed := map[int32]int64{}
	for part := range to {
		if c, ok := prior.Lookup(topic, part); ok && c.Err == nil && c.At >= 0 {
			committed[part] = c.At
		}
	}

	p, err := New(cfg)
	if err != nil {
		return Progress{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()

	progress := func() (Progress, bool) {
		for part, c := range p.Committed() {
			committed[part] = max(committed[part], c)
		}
		pr := Progress{Rows: p.inserted.Load(), Elapsed: time.Since(t0)}
		complete := true
		for part, end := range to {
			start := from[part]
			pr.Total += end - start
			at := min(max(committed[part], start), end)
			pr.Done += at - start
			if at < end {
				complete = false
			}
		}
		return pr, complete
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pr, complete := progress()
		if complete {
			cancel()
			err := <-done
			pr.Elapsed = time.Since(t0)
			report(pr)
			return pr, err
		}
		report(pr)
		select {
		case err := <-done:
			if err == nil {
				err = ctx.Err()
			}
			if err == nil {
				err = errors.New("backfill: the projector stopped before reaching the end offsets")
			}
			pr, _ := progress()
			return pr, err
		case <-t.C:
		}
	}
}

// DeleteGroup deletes a backfill's consumer group once it completed. A
// group that is already gone is no error.
func DeleteGroup(ctx context.Context, kcfg kafka.ClientConfig, group string) error {
	cl, err := kcfg.Aux("admin").NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).DeleteGroup(ctx, group)
	if err != nil {
		return fmt.Errorf("delete group %s: %w", group, err)
	}
	if res.Err != nil && !errors.Is(res.Err, kerr.GroupIDNotFound) {
		return fmt.Errorf("delete group %s: %w", group, res.Err)
	}
	return nil
}
