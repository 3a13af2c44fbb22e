package sequencer_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// transactions returns how many transactions a sequencer committed.
func transactions(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestInflightSizesTransactions checks that a transaction waits for the
// records that the producer of its process says it is writing to an owned
// partition, so that they are decided in it rather than in the next one,
// and that a count that never comes down delays a transaction by the push
// wait only.
func TestInflightSizesTransactions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEmbeddedEnv(t, 1)
	st, err := store.Open(store.Config{Dir: filepath.Join(t.TempDir(), "store"), Partitions: e.parts})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	inflight := kafka.NewInflight(e.parts)
	const pushWait = 300 * time.Millisecond
	seq, err := sequencer.New(sequencer.Config{
		Kafka: kafka.ClientConfig{Brokers: e.brokers, ClientID: "test-sequencer"}, Topics: e.names, Store: st,
		SessionTimeout: 2 * time.Second, Inflight: inflight, PushWait: pushWait, MaxBatchDuration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stopOK(t, runInProcess(ctx, seq))
	m := sequencer.MetricsOf(seq)
	applied := func() float64 { return testutil.ToFloat64(m.Outcomes.WithLabelValues("applied")) }
	waitApplied := func(n float64) time.Duration {
		t.Helper()
		start := time.Now()
		for applied() < n {
			if ctx.Err() != nil {
				t.Fatalf("%v applied, want %v", applied(), n)
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	p := schemas.Partition(schemas.ProjectKey("o", "p"), e.parts)
	// A first mutation, so that the sequencer has polled the partition.
	e.push(t, put("o", "p", "c1", 1, "a", `1`))
	waitApplied(1)
	if got := transactions(t, m.BatchSize); got != 1 {
		t.Fatalf("%d transactions after the first mutation, want 1", got)
	}

	// The producer writes a second record while the first is decided.
	inflight.Writing(p, 1)
	e.push(t, put("o", "p", "c1", 2, "a", `2`))
	time.Sleep(50 * time.Millisecond) // far longer than any wait without Inflight
	e.push(t, put("o", "p", "c2", 1, "b", `3`))
	inflight.Written(p, 1, 3) // offsets 0, 1, 2: acknowledged up to 3
	waitApplied(3)
	if got := transactions(t, m.BatchSize); got != 2 {
		t.Errorf("%d transactions after three mutations, want 2: the second and third in one", got)
	}
	if got := testutil.ToFloat64(m.PushWaits); got < 1 {
		t.Errorf("push waits %v, want at least 1", got)
	}

	// A count that never comes down (a produce that hangs) holds a
	// transaction for the push wait, no longer.
	inflight.Writing(p, 1)
	start := time.Now()
	e.push(t, put("o", "p", "c1", 3, "a", `4`))
	waitApplied(4)
	if took := time.Since(start); took > pushWait+5*time.Second {
		t.Errorf("a mutation waited %v with a stuck count, want about the push wait %v", took, pushWait)
	}
}
