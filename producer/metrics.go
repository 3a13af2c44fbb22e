package producer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	mutations *prometheus.CounterVec // by api
	requests  *prometheus.CounterVec // by api, result (ok or an error code)
	latency   *prometheus.HistogramVec
	// With produce rounds (rounds.go): the records of a round, and the
	// time a push waits for its round to be sent.
	roundRecords prometheus.Histogram
	roundWait    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "ingest", Name: "mutations_total",
			Help: "Mutations written to canon.mutations, by API (canon, replicache).",
		}, []string{"api"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "canon", Subsystem: "ingest", Name: "requests_total",
			Help: "Push requests by API and result: ok or the error code.",
		}, []string{"api", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "ingest", Name: "push_seconds",
			Help:    "Time from a push's arrival to Kafka's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"api"}),
		roundRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "ingest", Name: "round_records",
			Help:    "Records of the pushes that share a produce round.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		roundWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "canon", Subsystem: "ingest", Name: "round_wait_seconds",
			Help:    "Time from a push's arrival to the sending of its produce round.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.mutations, m.requests, m.latency, m.roundRecords, m.roundWait)
	}
	return m
}

func (m *metrics) observe(api string, n int, d time.Duration) {
	m.mutations.WithLabelValues(api).Add(float64(n))
	m.requests.WithLabelValues(api, "ok").Inc()
	m.latency.WithLabelValues(api).Observe(d.Seconds())
}

func (m *metrics) refused(api, code string) {
	m.requests.WithLabelValues(api, code).Inc()
}
