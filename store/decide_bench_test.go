package store_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// pipeline decides mutations over a store and applies each batch, as the
// sequencer does after a committed transaction.
type pipeline struct {
	tb      testing.TB
	st      *store.Store
	d       *model.Decider
	pending []store.Record
	offset  int64
	ts      time.Time
}

func newPipeline(tb testing.TB) *pipeline {
	st, err := store.Open(store.Config{Dir: tb.TempDir(), Partitions: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return &pipeline{tb: tb, st: st, d: model.NewDecider(st, model.NewRegistry(), schemas.DefaultLimits()),
		ts: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
}

func (p *pipeline) decide(client string, id uint64, name, args string) model.Decision {
	p.ts = p.ts.Add(time.Millisecond)
	m := &schemas.Mutation{Org: "acme", Project: "bench", Branch: "main", ClientGroup: "g", Client: client, ID: id,
		Name: name, Args: json.RawMessage(args)}
	d, err := p.d.Decide(model.MutationRecord{Mutation: m, Timestamp: p.ts, Offset: p.offset})
	if err != nil {
		p.tb.Fatal(err)
	}
	if d.Kind != model.Applied {
		p.tb.Fatalf("%s: %s %+v", name, d.Kind, d)
	}
	for i := range d.Chunks {
		p.pending = append(p.pending, store.Record{Chunk: &d.Chunks[i]})
		p.offset++
	}
	p.pending = append(p.pending, store.Record{Version: d.Version})
	p.offset++
	return d
}

func (p *pipeline) flush() {
	if err := p.st.Apply(0, p.pending, p.offset); err != nil {
		p.tb.Fatal(err)
	}
	p.pending = p.pending[:0]
	p.d.Reset()
}

// BenchmarkDecideApplySmall is the cost per mutation of deciding a small
// item.patch and applying it to the store (synced to disk), with the
// store written once per batch of 100 mutations, as the sequencer writes
// once per transaction.
func BenchmarkDecideApplySmall(b *testing.B) {
	p := newPipeline(b)
	for i := range 20 {
		p.decide("setup", uint64(i+1), "item.put", fmt.Sprintf(`{"collection":"tasks","id":"t%d","meta":{"title":"task %d"},"data":{"title":"task %d","done":false,"n":0}}`, i, i, i))
	}
	p.flush()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p.decide("c", uint64(i+1), "item.patch", fmt.Sprintf(`{"collection":"tasks","id":"t%d","data":{"n":%d}}`, i%20, i))
		if len(p.pending) >= 100 {
			p.flush()
		}
	}
	p.flush()
}

// BenchmarkEditLargeItem measures the bytes newly stored for a 1-byte edit
// in the middle of a 100 KB item: Canon's new chunks plus the version
// record, against the seed design that stored the whole body with the
// version (same edits, same run).
func BenchmarkEditLargeItem(b *testing.B) {
	p := newPipeline(b)
	rng := rand.New(rand.NewPCG(7, 7))
	words := make([]string, 0, 20000)
	for len(strings.Join(words, " ")) < 100_000 {
		words = append(words, fmt.Sprintf("w%x", rng.Uint32()))
	}
	text := []byte(strings.Join(words, " "))[:100_000]
	put := func(id uint64) model.Decision {
		body, _ := json.Marshal(map[string]string{"text": string(text)})
		return p.decide("c", id, "item.put", fmt.Sprintf(`{"collection":"docs","id":"big","data":%s}`, body))
	}
	put(1)
	p.flush()
	var canonBytes, wholeBytes int64
	b.ResetTimer()
	for i := range b.N {
		text[50_000] = byte('a' + i%26) // the 1-byte edit, in the middle
		d := put(uint64(i + 2))
		v, err := schemas.EncodeVersion(d.Version, schemas.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range d.Chunks {
			canonBytes += int64(len(c.Data))
		}
		canonBytes += int64(len(v))
		wholeBytes += d.Version.Items[0].Size + int64(len(v))
		p.flush()
	}
	b.ReportMetric(float64(canonBytes)/float64(b.N), "canon-B/edit")
	b.ReportMetric(float64(wholeBytes)/float64(b.N), "whole-B/edit")
	b.ReportMetric(float64(wholeBytes)/float64(canonBytes), "x-fewer")
}
