package live

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/sequencer"
)

// BenchmarkKafkaFloor is the least a design with Kafka transactions can
// do on this broker and machine, with no Canon code: the same 1,000
// records a second as BenchmarkPushToWebsocket (10 keys, one record each
// every 10ms, acks=all, idempotent, no linger) to an input topic of 3
// partitions; a transactional relay (GroupTransactSession, read_committed,
// with the sequencer's gather of the fetch that follows a buffered one)
// that copies each polled batch to an output topic in one transaction with
// its input offsets; a read_committed consumer of the output. Latency is
// from the produce call to the consumer's poll returning the copy. Run it
// with BenchmarkPushToWebsocket to compare the two:
//
//	go test ./projector/live -run '^$' -bench 'PushToWebsocket|KafkaFloor' -benchtime 300x -count 3
func BenchmarkKafkaFloor(b *testing.B) {
	k := testenv.NewKafka(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, out := k.Topic(b, "in"), k.Topic(b, "out")
	adm, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopics(ctx, 3, 1, nil, in, out); err != nil {
		b.Fatal(err)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(in),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	relay, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumerGroup(in+"-relay"), kgo.ConsumeTopics(in), kgo.TransactionalID(in+"-relay"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer relay.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(out),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(kafkaFloorFetchWait))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()

	relayDone := make(chan error, 1)
	go func() {
		for {
			polled := time.Now()
			recs := relay.PollFetches(ctx).Records()
			if ctx.Err() != nil {
				relayDone <- nil
				return
			}
			if len(recs) == 0 {
				continue
			}
			if time.Since(polled) < 200*time.Microsecond {
				// The sequencer's gather (Config.GatherWait): take the
				// fetch that follows a buffered one too.
				gctx, gcancel := context.WithTimeout(ctx, sequencer.DefaultGatherWait)
				recs = append(recs, relay.PollFetches(gctx).Records()...)
				gcancel()
			}
			if err := relay.Begin(); err != nil {
				relayDone <- err
				return
			}
			for _, r := range recs {
				relay.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
			}
			if _, err := relay.End(ctx, kgo.TryCommit); err != nil {
				relayDone <- err
				return
			}
		}
	}()

	const keys = 10
	type key struct {
		k  int
		id uint64
	}
	var mu sync.Mutex
	sent := map[key]time.Time{}
	var lat []time.Duration
	got := make(chan struct{}, keys*(b.N+1))
	go func() {
		for ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				k := key{int(r.Key[0]), binary.BigEndian.Uint64(r.Value)}
				if t0, ok := sent[k]; ok {
					lat = append(lat, now.Sub(t0))
				}
				got <- struct{}{}
			})
			mu.Unlock()
		}
	}()
	push := func(k int, id uint64) error {
		v := binary.BigEndian.AppendUint64(nil, id)
		t0 := time.Now()
		mu.Lock()
		sent[key{k, id}] = t0
		mu.Unlock()
		return prod.ProduceSync(ctx, &kgo.Record{Key: []byte{byte(k)}, Value: v}).FirstErr()
	}
	// Warm up: group join, producer ids, transactions.
	warm := time.Now()
	for k := range keys {
		if err := push(k, 0); err != nil {
			b.Fatal(err)
		}
	}
	for range keys {
		select {
		case <-got:
		case err := <-relayDone:
			b.Fatalf("relay: %v", err)
		case <-time.After(time.Minute):
			b.Fatal("warm-up records did not come through")
		}
	}
	b.Logf("relay warm after %v", time.Since(warm))
	mu.Lock()
	lat = lat[:0]
	mu.Unlock()

	b.ResetTimer()
	var pushers sync.WaitGroup
	for k := range keys {
		pushers.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for round := range b.N {
				<-tick.C
				if err := push(k, uint64(round+1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	pushers.Wait()
	for range keys * b.N {
		select {
		case <-got:
		case err := <-relayDone:
			b.Fatalf("relay: %v", err)
		case <-time.After(time.Minute):
			b.Fatal("records did not come through")
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
	if len(lat) != keys*b.N {
		b.Fatalf("%d latencies for %d records", len(lat), keys*b.N)
	}
}

// kafkaFloorFetchWait is the output consumer's fetch wait, the same as the
// changelog tail's.
const kafkaFloorFetchWait = 100 * time.Millisecond
