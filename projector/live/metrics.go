package live

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	subscribers prometheus.Gauge
	sentVersion prometheus.Counter
	sentOther   prometheus.Counter
	catchUp     prometheus.Counter
	storeFills  prometheus.Counter
	overflows   prometheus.Counter
	undecodable prometheus.Counter
	publishLag  prometheus.Histogram
	closes      *prometheus.CounterVec
	pushes      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "messages_sent_total",
		Help: "Messages written to websocket subscribers, by type (version or other)."}, []string{"type"})
	m := &metrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "canon", Subsystem: "live", Name: "subscribers",
			Help: "Open websocket subscriptions."}),
		sentVersion: sent.WithLabelValues("version"),
		sentOther:   sent.WithLabelValues("other"),
		catchUp: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "catchup_versions_total",
			Help: "Versions read from the store for catch-up or to fill a gap of the live stream."}),
		storeFills: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "store_fills_total",
			Help: "Live versions that arrived ahead of the last one sent, so that the versions in between were read from the store."}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "queue_overflows_total",
			Help: "Subscriber queues that overflowed (the subscriber is closed as slow)."}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "undecodable_records_total",
			Help: "Changelog records that could not be decoded or encoded for subscribers."}),
		publishLag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "canon", Subsystem: "live", Name: "publish_lag_seconds",
			Help:    "Time from a version record's Kafka timestamp to its fan-out by the hub.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "closes_total",
			Help: "Subscriptions closed by the server, by close code (4008: slow)."}, []string{"code"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "canon", Subsystem: "live", Name: "pushes_total",
			Help: "Push messages received on websockets, by result (ok or the error code)."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(sent, m.subscribers, m.catchUp, m.storeFills, m.overflows, m.undecodable, m.publishLag, m.closes, m.pushes)
	}
	return m
}

func (m *metrics) closed(code int) { m.closes.WithLabelValues(strconv.Itoa(code)).Inc() }
