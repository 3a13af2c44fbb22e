package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/schemas"
)

// BenchmarkIngest pushes mutations over HTTP through the producer (batches
// of 100 from 8 pushers on 8 projects, answered once Kafka acknowledged
// them) and, in the same iteration, produces the same records straight to
// the real broker with franz-go (ProduceSync of the same batches from 8
// goroutines, acks=all, idempotent, linger 1ms). It reports both rates and
// http/raw, which the issue asks to keep at 0.5 or more.
//
// Both sides encode the records in the timed part, with the same encoder:
// the producer checks each args (it comes from the network) and then
// encodes with schemas.EncodeCheckedMutation; the raw side knows its args
// are compact JSON and only encodes.
//
//	go test ./internal/e2e -run '^$' -bench Ingest -benchtime 3x -count 5
func BenchmarkIngest(b *testing.B) {
	const (
		pushers = 8
		perPush = 100
		pushes  = 25 // per pusher and iteration: 20,000 mutations in all
	)
	ctx := context.Background()
	pl := startPipeline(b, 6, true) // no sequencer: ingest only
	url := pl.serveProducer(b, producer.Config{Rate: 1e9, Burst: 1e9})
	raw, err := kgo.NewClient(kgo.SeedBrokers(pl.kcfg.Brokers...), kgo.DefaultProduceTopic(pl.info.Names.Mutations),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchMaxBytes(4<<20),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	args := json.RawMessage(`{"collection":"tasks","id":"t1","data":{"title":"a task with a title of some length","done":false,"n":12345}}`)
	clients := make([]*client.Client, pushers)
	projects := make([]string, pushers)
	for i := range clients {
		projects[i] = fmt.Sprintf("bench%d", i)
		clients[i] = client.New(url, client.WithToken(pl.token(b, fmt.Sprintf("u%d", i), projects[i])))
	}
	nextID := make([]uint64, pushers)
	batch := func(i int) client.Push {
		p := client.Push{ClientGroup: "g", Mutations: make([]client.Mutation, perPush)}
		for j := range p.Mutations {
			nextID[i]++
			p.Mutations[j] = client.Mutation{Client: "c", ID: nextID[i], Name: "item.put", Args: args, TS: 1}
		}
		return p
	}
	records := func(i int, p client.Push) []*kgo.Record {
		recs := make([]*kgo.Record, len(p.Mutations))
		for j, m := range p.Mutations {
			v, err := schemas.EncodeCheckedMutation(&schemas.Mutation{Org: "acme", Project: projects[i], Branch: "main", ClientGroup: p.ClientGroup,
				Client: m.Client, ID: m.ID, Name: m.Name, Args: m.Args, TS: m.TS, Principal: "user:u", ReceivedAt: 1}, schemas.DefaultLimits())
			if err != nil {
				b.Fatal(err)
			}
			recs[j] = &kgo.Record{Key: schemas.ProjectKey("acme", projects[i]), Value: v,
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}}
		}
		return recs
	}
	run := func(push func(i int, p client.Push) error) time.Duration {
		work := make([][]client.Push, pushers)
		for i := range work {
			for range pushes {
				work[i] = append(work[i], batch(i))
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, pushers)
		for i := range pushers {
			wg.Go(func() {
				for _, p := range work[i] {
					if err := push(i, p); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	viaHTTP := func(i int, p client.Push) error {
		_, err := clients[i].Push(ctx, "acme", projects[i], p, client.PushOptions{})
		return err
	}
	viaRaw := func(i int, p client.Push) error {
		return raw.ProduceSync(ctx, records(i, p)...).FirstErr()
	}
	// Warm up both paths (connections, metadata, producer ids).
	run(viaHTTP)
	run(viaRaw)
	b.ResetTimer()
	var ratios []float64
	var httpTotal, rawTotal time.Duration
	for range b.N {
		h := run(viaHTTP)
		r := run(viaRaw)
		httpTotal += h
		rawTotal += r
		ratios = append(ratios, r.Seconds()/h.Seconds())
	}
	n := float64(pushers * perPush * pushes * b.N)
	sort.Float64s(ratios)
	b.ReportMetric(n/httpTotal.Seconds(), "http-muts/s")
	b.ReportMetric(n/rawTotal.Seconds(), "raw-muts/s")
	b.ReportMetric(ratios[len(ratios)/2], "http/raw")
}
