package sequencer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type metrics struct {
	outcomes       *prometheus.CounterVec // by outcome: applied, error, duplicate, gap, rejected
	versions       prometheus.Counter
	batchSize      prometheus.Histogram
	txnSeconds     prometheus.Histogram
	txnAborted     *prometheus.CounterVec // by cause
	restoreLag     *prometheus.GaugeVec   // changelog records left to restore, by partition
	restoreSeconds prometheus.Histogram
	restoreRecords prometheus.Counter
	restoreBytes   prometheus.Counter
	// changelogSkipped counts canon.versions records no sequencer wrote.
	changelogSkipped prometheus.Counter
	// checksRunning is how many restored checkpoints are being checked
	// after their restore returned; checksFailed counts the ones found
	// corrupt (their partitions are restored again).
	checksRunning   prometheus.Gauge
	checksFailed    prometheus.Counter
	ownedPartitions prometheus.Gauge
	restoring       prometheus.Gauge
	offsetBehind    prometheus.Counter
	inputSkipped    prometheus.Counter
	fenced          prometheus.Counter
	// livenessPeers counts the other instances this one holds a liveness
	// connection to (liveness.go), and
	// livenessRemovals the dead ones removed from the group.
	livenessPeers    prometheus.Gauge
	livenessRemovals prometheus.Counter
	// gathers counts transactions that waited for the fetch after a
	// stale poll (Config.GatherWait).
	gathers prometheus.Counter
	// pushWaits counts transactions that waited for records the producer
	// of the process was writing (Config.Inflight).
	pushWaits prometheus.Counter
	// standbys is how many partitions the instance keeps warm; standbyLag
	// how far each is behind the last stable offset of its follower's
	// start.
	standbys   prometheus.Gauge
	standbyLag *prometheus.GaugeVec
	// phase is the time a committed transaction spent in each phase of
	// its cycle (docs/performance.md breaks an edit's cycle down with
	// it); inputAge how old an input record was when a poll returned it
	// (its producer's timestamp to the poll); requests the round trips of
	// the session's Kafka client, by request.
	phase    *prometheus.HistogramVec
	inputAge prometheus.Histogram
	requests *prometheus.HistogramVec
}

// Phases of a transaction, for metrics.phase.
const (
	phaseDecide = "decide" // deciding the polled records and producing the results
	phaseWait   = "wait"   // polls for more records (PushWait, GatherWait)
	phaseFlush  = "flush"  // until Kafka acknowledged every produced record
	phaseEnd    = "end"    // offset commit, heartbeat and EndTxn
	phaseStore  = "store"  // the store write and Config.Committed
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "mutations_total",
			Help: "Mutations decided, by outcome: applied, error, duplicate, gap, rejected.",
		}, []string{"outcome"}),
		versions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "versions_total",
			Help: "Versions published in committed transactions (rate() gives versions per second).",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "batch_mutations",
			Help:    "Mutations per transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		txnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "transaction_seconds",
			Help:    "Time from the start of a transaction to its committed end.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		txnAborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "transactions_aborted_total",
			Help: "Transactions not committed, by cause: rebalance, error.",
		}, []string{"cause"}),
		restoreLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "restore_lag_records",
			Help: "Changelog records left to restore, by partition.",
		}, []string{"partition"}),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "restore_seconds",
			Help:    "Duration of partition restores.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		restoreRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "restore_records_total",
			Help: "Changelog records applied to the store by restores.",
		}),
		gathers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "gather_waits_total",
			Help: "Transactions that began with records fetched during the previous one and waited (at most the gather wait) for the next fetch.",
		}),
		pushWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "push_waits_total",
			Help: "Waits of transactions for records that the producer of the process was writing to the partitions they own (at most the push wait from the first poll).",
		}),
		changelogSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "changelog_skipped_total",
			Help: "canon.versions records skipped by restores because no sequencer wrote them (they do not decode or do not follow the versions before them).",
		}),
		restoreBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "restore_bytes_total",
			Help: "Changelog bytes applied to the store by restores.",
		}),
		checksRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "checkpoint_checks_running",
			Help: "Checkpoints restored into owned partitions whose files are still being checked against their checksums (the partitions are decided on meanwhile).",
		}),
		checksFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "checkpoint_checks_failed_total",
			Help: "Restored checkpoints found corrupt by their check (after or during the restore, by an owner or a standby), and store corruption found while deciding: the partition is dropped and restored again.",
		}),
		ownedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "owned_partitions",
			Help: "Partitions of canon.mutations this instance owns.",
		}),
		restoring: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "restoring_partitions",
			Help: "Owned partitions not yet restored; the instance is ready when this is 0.",
		}),
		offsetBehind: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "input_offset_behind_total",
			Help: "Restores after which the group's committed input offset was behind what was decided (offsets reset or deleted).",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "fenced_transactions_total",
			Help: "Open transactions of instances gone from the group that a restore fenced rather than wait for their timeout.",
		}),
		livenessPeers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "liveness_peers",
			Help: "Other instances of the group this instance holds a liveness connection to (a kill of one is noticed at once).",
		}),
		livenessRemovals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "liveness_removals_total",
			Help: "Instances this instance removed from the group because their liveness connection closed without a goodbye and their address refused connections.",
		}),
		inputSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "sequencer", Name: "input_skipped_total",
			Help: "Input records skipped because they were decided before (the group's offsets were moved back).",
		}),
	}
	m.standbys = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "canon", Subsystem: "sequencer", Name: "standby_partitions",
		Help: "Partitions this instance does not own and keeps warm (--standbys).",
	})
	m.standbyLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "canon", Subsystem: "sequencer", Name: "standby_lag_records",
		Help: "Changelog offsets a standby partition's copy is behind the last stable offset, measured every 2s.",
	}, []string{"partition"})
	cycle := prometheus.ExponentialBuckets(0.0000625, 2, 16)
	m.phase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "canon", Subsystem: "sequencer", Name: "transaction_phase_seconds",
		Help:    "Time a committed transaction spent per phase: decide, wait (for more records), flush (produce acknowledged), end (offset commit, heartbeat, EndTxn), store (write and publication).",
		Buckets: cycle,
	}, []string{"phase"})
	m.inputAge = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "canon", Subsystem: "sequencer", Name: "input_age_seconds",
		Help:    "Age of an input record when a poll returned it: from its producer's timestamp (the push's produce) to the poll.",
		Buckets: cycle,
	})
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "canon", Subsystem: "sequencer", Name: "kafka_request_seconds",
		Help:    "Round trips of the transactional session's Kafka requests (write to response read), by request; a fetch includes the broker's wait for records.",
		Buckets: cycle,
	}, []string{"request"})
	if reg != nil {
		reg.MustRegister(m.phase, m.inputAge, m.requests)
		reg.MustRegister(m.standbys, m.standbyLag)
		reg.MustRegister(m.outcomes, m.versions, m.batchSize, m.txnSeconds, m.txnAborted, m.restoreLag,
			m.restoreSeconds, m.restoreRecords, m.restoreBytes, m.changelogSkipped, m.checksRunning, m.checksFailed, m.ownedPartitions, m.restoring, m.offsetBehind, m.inputSkipped, m.fenced, m.gathers, m.pushWaits,
			m.livenessPeers, m.livenessRemovals)
	}
	return m
}

// requestHook records the round trips of the session's Kafka client in
// metrics.requests.
type requestHook struct{ m *metrics }

func (h requestHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil {
		return
	}
	h.m.requests.WithLabelValues(kmsg.NameForKey(key)).Observe(e2e.DurationE2E().Seconds())
}
