package history

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	rows     *prometheus.CounterVec
	batches  prometheus.Counter
	flushSec prometheus.Histogram
	versions prometheus.Counter
	rejected prometheus.Counter
	retries  prometheus.Counter
	lag      *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, group string) *metrics {
	labels := prometheus.Labels{"group": group}
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "projector", Name: "rows_inserted_total", ConstLabels: labels,
			Help: "Rows inserted into the ClickHouse history tables, redelivered rows included, by table.",
		}, []string{"table"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "projector", Name: "batches_total", ConstLabels: labels,
			Help: "Batches inserted into ClickHouse and committed.",
		}),
		flushSec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "projector", Name: "batch_seconds", ConstLabels: labels,
			Help:    "Time to insert a batch into ClickHouse and commit its offsets.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		versions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "projector", Name: "versions_total", ConstLabels: labels,
			Help: "Version records projected.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "projector", Name: "rejected_total", ConstLabels: labels,
			Help: "Changelog records the projector could not handle, sent to the rejected topic.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "projector", Name: "retries_total", ConstLabels: labels,
			Help: "Failed ClickHouse or Kafka operations that were retried.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "canon", Subsystem: "projector", Name: "lag_records", ConstLabels: labels,
			Help: "Records of the versions topic behind the group's committed offset (high watermark - committed), by partition.",
		}, []string{"partition"}),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.batches, m.flushSec, m.versions, m.rejected, m.retries, m.lag)
	}
	return m
}
