package producer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	mutations *prometheus.CounterVec // by api
	requests  *prometheus.CounterVec // by api, result (ok or an error code)
	latency   *prometheus.HistogramVec
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
	}
	if reg != nil {
		reg.MustRegister(m.mutations, m.requests, m.latency)
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
