package kafka

import (
	"context"
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
	e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
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
				found = m.GetCounter().GetValue() == 3
			}
		}
	}
	if !found {
		t.Errorf("canon_kafka_requests_total{client=\"canon-test\",request=\"Produce\"} is not 3 in %v", families)
	}
}
