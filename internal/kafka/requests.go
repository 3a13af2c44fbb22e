package kafka

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestCounts counts the requests that a process's Kafka clients write
// to the brokers, by client id and request kind (Produce, Fetch, EndTxn
// …), as the counter canon_kafka_requests_total{client, request}: what
// each edit costs the brokers, in round trips, per client of the process.
// Unlike kprom's metrics it also counts the short-lived helper clients
// (ClientConfig.Aux keeps it), under their own client ids.
//
// It is a prometheus.Collector; register it once per process. The zero
// value is not usable: make it with NewRequestCounts.
type RequestCounts struct {
	mu sync.Mutex
	n  map[requestKey]*atomic.Int64
}

type requestKey struct {
	client string
	key    int16
}

// NewRequestCounts returns counts at zero.
func NewRequestCounts() *RequestCounts {
	return &RequestCounts{n: map[requestKey]*atomic.Int64{}}
}

var requestsDesc = prometheus.NewDesc("canon_kafka_requests_total",
	"Requests written to the Kafka brokers, by client id and request kind.", []string{"client", "request"}, nil)

// Describe implements prometheus.Collector.
func (c *RequestCounts) Describe(ch chan<- *prometheus.Desc) { ch <- requestsDesc }

// Collect implements prometheus.Collector.
func (c *RequestCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(n.Load()), k.client, kmsg.NameForKey(k.key))
	}
}

// Count returns the requests of one kind (kmsg's name, e.g. "Produce")
// that a client wrote.
func (c *RequestCounts) Count(client, request string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		if k.client == client && kmsg.NameForKey(k.key) == request {
			return n.Load()
		}
	}
	return 0
}

// hook returns the kgo hook that counts a client's requests.
func (c *RequestCounts) hook(client string) kgo.Hook {
	return &requestHook{counts: c, client: client}
}

// requestHook counts one client's requests; the counters of the usual
// request kinds are looked up once and then kept.
type requestHook struct {
	counts *RequestCounts
	client string
	byKey  sync.Map // int16 → *atomic.Int64
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h *requestHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	if n, ok := h.byKey.Load(key); ok {
		n.(*atomic.Int64).Add(1)
		return
	}
	c := h.counts
	c.mu.Lock()
	k := requestKey{h.client, key}
	n := c.n[k]
	if n == nil {
		n = new(atomic.Int64)
		c.n[k] = n
	}
	c.mu.Unlock()
	h.byKey.Store(key, n)
	n.Add(1)
}
