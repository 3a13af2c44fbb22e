package changelog

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/kafka"
)

// LagInterval is how often a LagWatch reads the changelog's last stable
// offsets.
const LagInterval = 2 * time.Second

// LagWatch measures how far a store's copies of changelog partitions are
// behind the changelog: the last stable offset of each partition (what a
// read_committed reader can reach) minus the next offset the store holds,
// read every LagInterval. A caught-up follower is 0 (its offset counts the
// transaction markers it read). It is for partitions a materializer
// follows (standbys, read replicas); an owner writes its store after each
// commit and is not behind what it decided.
type LagWatch struct {
	// Kafka connects to the brokers; Topic is canon.versions.
	Kafka kafka.ClientConfig
	Topic string
	// Partitions returns the partitions to measure now, and Offset the
	// next offset the store holds of one (ok false: nothing).
	Partitions func() []int32
	Offset     func(p int32) (next int64, ok bool, err error)
	// Report, when set, is told each measurement (records behind, by
	// partition), after the previous one's partitions that are gone.
	Report func(lags map[int32]int64)
	Log    *slog.Logger

	mu   sync.Mutex
	lags map[int32]int64
}

// Lags returns the last measurement: records behind, by partition (only
// partitions still measured).
func (w *LagWatch) Lags() map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.lags)
}

// Run measures every LagInterval until ctx ends.
func (w *LagWatch) Run(ctx context.Context) error {
	cl, err := w.Kafka.Aux("lag").NewClient()
	if err != nil {
		return fmt.Errorf("kafka client for the changelog's lag: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	t := time.NewTicker(LagInterval)
	defer t.Stop()
	for {
		if err := w.measure(ctx, adm); err != nil && ctx.Err() == nil && w.Log != nil {
			w.Log.Warn("measure the lag of the store's copies of the changelog", "topic", w.Topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (w *LagWatch) measure(ctx context.Context, adm *kadm.Client) error {
	ps := w.Partitions()
	lags := make(map[int32]int64, len(ps))
	if len(ps) > 0 {
		ctx, cancel := context.WithTimeout(ctx, LagInterval)
		defer cancel()
		ends, err := adm.ListCommittedOffsets(ctx, w.Topic) // last stable offsets
		if err != nil {
			return fmt.Errorf("list the last stable offsets of %s: %w", w.Topic, err)
		}
		for _, p := range slices.Sorted(slices.Values(ps)) {
			end, ok := ends.Lookup(w.Topic, p)
			if !ok || end.Err != nil {
				continue
			}
			next, ok, err := w.Offset(p)
			if err != nil {
				return err
			}
			if !ok {
				next = 0
			}
			lags[p] = max(0, end.Offset-next)
		}
	}
	w.mu.Lock()
	w.lags = lags
	w.mu.Unlock()
	if w.Report != nil {
		w.Report(lags)
	}
	return nil
}
