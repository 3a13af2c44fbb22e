package sequencer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Metrics are a sequencer's metrics, for the tests of package
// sequencer_test, which read them with testutil.ToFloat64.
type Metrics struct {
	Outcomes         *prometheus.CounterVec
	RestoreRecords   prometheus.Counter
	RestoreBytes     prometheus.Counter
	ChangelogSkipped prometheus.Counter
	OwnedPartitions  prometheus.Gauge
	OffsetBehind     prometheus.Counter
	InputSkipped     prometheus.Counter
	Fenced           prometheus.Counter
	// BatchSize observes each committed transaction's mutations.
	BatchSize prometheus.Histogram
	PushWaits prometheus.Counter
	// ChecksFailed counts restored checkpoints found corrupt after
	// their restore, and corruption found while deciding.
	ChecksFailed prometheus.Counter
}

// MetricsOf returns s's metrics.
func MetricsOf(s *Sequencer) Metrics {
	return Metrics{Outcomes: s.m.outcomes, RestoreRecords: s.m.restoreRecords, RestoreBytes: s.m.restoreBytes,
		ChangelogSkipped: s.m.changelogSkipped, OwnedPartitions: s.m.ownedPartitions, OffsetBehind: s.m.offsetBehind,
		InputSkipped: s.m.inputSkipped, Fenced: s.m.fenced, BatchSize: s.m.batchSize, PushWaits: s.m.pushWaits,
		ChecksFailed: s.m.checksFailed}
}

// ReadPartitionCounts reads the topics' partition counts, as Run does
// first: a restore looks for a partition's last rejection in
// canon.rejected, by partition count.
func ReadPartitionCounts(ctx context.Context, s *Sequencer) error { return s.readPartitionCounts(ctx) }

// Restore restores partition p of s's store from the changelog, as an
// assignment does, for BenchmarkSequencerRestore.
func Restore(ctx context.Context, s *Sequencer, cl *kgo.Client, p int32) error {
	return s.restore(ctx, cl, p, 0)
}
