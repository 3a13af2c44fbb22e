package kafka

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Every request of a client, and of its Aux helpers under their own ids,
// is counted by kind, and exported as canon_kafka_requests_total.
func TestRequestCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEmbedded(t)
	counts := NewRequestCounts()
	cfg := ClientConfig{Brokers: e.Brokers(), ClientID: "canon-test", Requests: counts}
	open := func(cfg ClientConfig, more ...kgo.Opt) *kgo.Client {
		t.Helper()
		opts, err := cfg.Opts()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(opts, more...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	cl := open(cfg)
	if _, err := kadm.NewClient(newClient(t, e.Brokers())).CreateTopic(ctx, 1, 1, nil, "counted"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "counted", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts.Count("canon-test", "Produce"); n != 3 {
		t.Errorf("counted %d produce requests of canon-test, want 3 (one per ProduceSync)", n)
	}
	// The bytes follow the requests: a 10 KB record makes the produce
	// requests at least 10 KB larger, and every request has a response.
	w0, r0 := counts.Bytes("canon-test", "Produce")
	if w0 <= 0 || r0 <= 0 {
		t.Errorf("counted %d bytes written and %d read by 3 produce requests, want both > 0", w0, r0)
	}
	big := make([]byte, 10_000) // random: the producer's compression cannot shrink it
	rand.Read(big)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "counted", Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if w1, r1 := counts.Bytes("canon-test", "Produce"); w1-w0 < 10_000 || r1 <= r0 {
		t.Errorf("a 10,000-byte record: produce bytes written %d → %d, read %d → %d; want +10,000 written at least, more read", w0, w1, r0, r1)
	}
	aux := open(cfg.Aux("helper"))
	if err := aux.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counts.Count("canon-test-helper", "Metadata"); n < 1 {
		t.Errorf("counted %d metadata requests of the Aux client, want at least 1", n)
	}
	if n := counts.Count("canon-test", "Fetch"); n != 0 {
		t.Errorf("counted %d fetch requests of a client that fetched nothing", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(counts)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if f.GetName() == "canon_kafka_requests_total" && labels["client"] == "canon-test" && labels["request"] == "Produce" {
				found = m.GetCounter().GetValue() == 4
			}
		}
	}
	if !found {
		t.Errorf("canon_kafka_requests_total{client=\"canon-test\",request=\"Produce\"} is not 4 in %v", families)
	}
}

// compression.type picks the codec of the batches a client produces: the
// records come back from the broker in batches of that codec; without it,
// snappy (DefaultCompression).
func TestCompressionOption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startEmbedded(t)
	if _, err := kadm.NewClient(newClient(t, e.Brokers())).CreateTopic(ctx, 1, 1, nil, "compressed"); err != nil {
		t.Fatal(err)
	}
	// kmsg's codes of the batch attributes' compression.
	for name, code := range map[string]uint8{"": 2, "none": 0, "snappy": 2, "lz4": 3, "zstd": 4} {
		c := ClientConfig{Brokers: e.Brokers(), ClientID: "canon-test"}
		if name != "" {
			if err := (SecurityConfig{Options: []string{"compression.type=" + name}}).Apply(&c); err != nil {
				t.Fatal(err)
			}
		}
		cl, err := c.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		value := []byte(strings.Repeat("the same words again and again ", 100))
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "compressed", Key: []byte("codec " + name), Value: value}).FirstErr()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		cons, err := ClientConfig{Brokers: e.Brokers()}.NewClient(kgo.ConsumeTopics("compressed"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		var got *kgo.Record
		for got == nil {
			fs := cons.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Key) == "codec "+name {
					got = r
				}
			})
		}
		cons.Close()
		if ct := got.Attrs.CompressionType(); ct != code || string(got.Value) != string(value) {
			t.Errorf("compression.type=%s: a batch of compression %d, value intact %v; want compression %d", name, ct, string(got.Value) == string(value), code)
		}
	}
}

// startEmbedded starts an embedded broker on a free port of 127.0.0.1,
// closed with t.
func startEmbedded(t *testing.T) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
