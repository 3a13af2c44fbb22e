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
// It also counts the bytes of those requests and of their responses, as
// canon_kafka_request_bytes_total{client, request, direction} (direction
// "write" for the requests, "read" for the responses): what each client
// sends to and gets from the brokers, e.g. the sequencer's produce
// requests against its fetches.
//
// It is a prometheus.Collector; register it once per process. The zero
// value is not usable: make it with NewRequestCounts.
type RequestCounts struct {
	mu sync.Mutex
	n  map[requestKey]*requestCount
}

// requestCount is one (client, request kind)'s requests and their bytes.
type requestCount struct {
	n, written, read atomic.Int64
}

type requestKey struct {
	client string
	key    int16
}

// NewRequestCounts returns counts at zero.
func NewRequestCounts() *RequestCounts {
	return &RequestCounts{n: map[requestKey]*requestCount{}}
}

var (
	requestsDesc = prometheus.NewDesc("canon_kafka_requests_total",
		"Requests written to the Kafka brokers, by client id and request kind.", []string{"client", "request"}, nil)
	requestBytesDesc = prometheus.NewDesc("canon_kafka_request_bytes_total",
		"Bytes of the requests written to the Kafka brokers (direction write) and of their responses (read), by client id and request kind.",
		[]string{"client", "request", "direction"}, nil)
)

// Describe implements prometheus.Collector.
func (c *RequestCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- requestsDesc
	ch <- requestBytesDesc
}

// Collect implements prometheus.Collector.
func (c *RequestCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		name := kmsg.NameForKey(k.key)
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(n.n.Load()), k.client, name)
		ch <- prometheus.MustNewConstMetric(requestBytesDesc, prometheus.CounterValue, float64(n.written.Load()), k.client, name, "write")
		ch <- prometheus.MustNewConstMetric(requestBytesDesc, prometheus.CounterValue, float64(n.read.Load()), k.client, name, "read")
	}
}

// Count returns the requests of one kind (kmsg's name, e.g. "Produce")
// that a client wrote.
func (c *RequestCounts) Count(client, request string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		if k.client == client && kmsg.NameForKey(k.key) == request {
			return n.n.Load()
		}
	}
	return 0
}

// Bytes returns the bytes of the requests of one kind that a client
// wrote, and of the responses it read.
func (c *RequestCounts) Bytes(client, request string) (written, read int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		if k.client == client && kmsg.NameForKey(k.key) == request {
			return n.written.Load(), n.read.Load()
		}
	}
	return 0, 0
}

// ByteCounts returns the bytes counted so far by "client request
// direction" (direction write or read), as canon_kafka_request_bytes_total
// labels them.
func (c *RequestCounts) ByteCounts() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]float64, 2*len(c.n))
	for k, n := range c.n {
		name := k.client + " " + kmsg.NameForKey(k.key)
		out[name+" write"] = float64(n.written.Load())
		out[name+" read"] = float64(n.read.Load())
	}
	return out
}

// Hook returns the kgo hook that counts the requests of a client made
// without ClientConfig (a benchmark's own clients), under the id client.
func (c *RequestCounts) Hook(client string) kgo.Hook {
	return c.hook(client)
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
	byKey  sync.Map // int16 → *requestCount
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h *requestHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	n := h.count(key)
	n.n.Add(1)
	n.written.Add(int64(written))
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *requestHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, read int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	h.count(key).read.Add(int64(read))
}

// count returns the counter of the client's requests of kind key.
func (h *requestHook) count(key int16) *requestCount {
	if n, ok := h.byKey.Load(key); ok {
		return n.(*requestCount)
	}
	c := h.counts
	c.mu.Lock()
	k := requestKey{h.client, key}
	n := c.n[k]
	if n == nil {
		n = new(requestCount)
		c.n[k] = n
	}
	c.mu.Unlock()
	h.byKey.Store(key, n)
	return n
}
