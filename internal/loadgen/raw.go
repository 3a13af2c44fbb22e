package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// RawResult is what the raw Kafka baseline measured: the same mutation
// records, produced by one goroutine per client in the same batches
// (ProduceSync, acks=all, idempotent, linger 1ms, keyed by project like
// Canon's producer, compressed with Canon's codec: snappy, or what
// `--kafka-option compression.type=…` in the run's CanonArgs names) and
// consumed back by one consumer.
type RawResult struct {
	Records, Consumed int
	Bytes             int64
	// Elapsed is from the first produce to the last record consumed.
	Elapsed time.Duration
	// Latency is from the start of a record's produce to its consumption.
	Latency Latencies
	// BrokerCPU is the local broker's CPU time from the first produce to
	// the last record consumed; 0 when its process was not found.
	BrokerCPU time.Duration
	// LoadCPU is this process's CPU time over the same span: the
	// baseline's producers and consumer.
	LoadCPU time.Duration
	// RequestBytes are the bytes of the baseline's requests and responses
	// over the same span, by "client request direction", the clients
	// being raw-producer and raw-consumer (as Canon's RequestBytes).
	RequestBytes map[string]float64

	samples []sample
}

// headerSent carries the produce time (Unix ns) of a baseline record; the
// only difference from the records Canon's producer writes.
const headerSent = "bench-sent"

func (r *run) runRaw(ctx context.Context, pushes [][]pushed) (RawResult, error) {
	cfg := r.cfg
	var res RawResult
	for _, ps := range pushes {
		for _, p := range ps {
			res.Records += p.size
		}
	}
	topic := r.prefix + "raw.mutations"
	admCl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return res, err
	}
	defer admCl.Close()
	maxBytes := fmt.Sprint(kafka.DefaultMaxMessageBytes)
	cr, err := kadm.NewClient(admCl).CreateTopic(ctx, int32(cfg.Partitions), -1, map[string]*string{"max.message.bytes": &maxBytes}, topic)
	if err == nil {
		err = cr.Err
	}
	if err != nil {
		return res, fmt.Errorf("create %s: %w", topic, err)
	}
	codec, err := compressionOf(cfg.CanonArgs)
	if err != nil {
		return res, err
	}
	counts := kafka.NewRequestCounts()
	prod, err := kgo.NewClient(kgo.ProducerBatchCompression(codec), kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(topic), kgo.WithHooks(counts.Hook("raw-producer")),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(topic), kgo.WithHooks(counts.Hook("raw-consumer")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxPartitionBytes(8<<20), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return res, err
	}
	defer cons.Close()

	// Warm up: metadata, producer id and the consumer's first fetch; the
	// record is not counted.
	warm := &kgo.Record{Key: []byte("warm-up"), Value: []byte("{}"),
		Headers: []kgo.RecordHeader{{Key: headerSent, Value: binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))}}}
	if err := prod.ProduceSync(ctx, warm).FirstErr(); err != nil {
		return res, fmt.Errorf("produce to %s: %w", topic, err)
	}
	for seen := false; !seen; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return res, fmt.Errorf("consume %s: %w", topic, err)
		}
		seen = fs.NumRecords() > 0
	}

	b0 := cpuOf(r.brokerPID)
	l0 := cpuOf(os.Getpid())
	bytes0 := counts.ByteCounts()
	start := time.Now()
	var (
		last    time.Time
		samples = make([]sample, 0, res.Records)
	)
	consumed := make(chan error, 1)
	cctx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	go func() {
		for len(samples) < res.Records {
			fs := cons.PollFetches(cctx)
			if err := fs.Err0(); err != nil {
				consumed <- fmt.Errorf("consume %s: %w", topic, err)
				return
			}
			at := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				for _, h := range rec.Headers {
					if h.Key == headerSent && len(h.Value) == 8 {
						sent := time.Unix(0, int64(binary.BigEndian.Uint64(h.Value)))
						samples = append(samples, sample{at: at.Sub(start), latency: at.Sub(sent)})
					}
				}
			})
			last = at
		}
		consumed <- nil
	}()

	var bytesMu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for i, ps := range pushes {
		g.Go(func() error {
			name := clientName(i)
			src := cfg.newSource(i)
			pace := cfg.newPacer(start)
			ids := make(map[int]uint64) // document → last id
			var n int64
			for k, rec := range ps {
				if d := pace.wait(time.Now()); d > 0 {
					select {
					case <-gctx.Done():
						return gctx.Err()
					case <-time.After(d):
					}
				}
				p := src.next()
				if p.doc != rec.doc || len(p.ops) < rec.size {
					return fmt.Errorf("client %s: the baseline's push %d is not Canon's (document %d with %d mutations; Canon's: document %d with %d)", name, k, p.doc, len(p.ops), rec.doc, rec.size)
				}
				ops := p.ops[:rec.size]
				project := r.projects[p.doc]
				key := schemas.ProjectKey(r.org, project)
				now := time.Now()
				recs := make([]*kgo.Record, len(ops))
				for j, o := range ops {
					ids[p.doc]++
					v, err := schemas.EncodeMutation(&schemas.Mutation{Org: r.org, Project: project, Branch: "main",
						ClientGroup: "g-" + name, Client: name, ID: ids[p.doc], Name: o.name, Args: o.args,
						TS: now.UnixMilli(), Principal: "bench:" + name, ReceivedAt: now.UnixMilli()}, schemas.DefaultLimits())
					if err != nil {
						return err
					}
					n += int64(len(v))
					recs[j] = &kgo.Record{Key: key, Value: v, Headers: []kgo.RecordHeader{
						{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)},
						{Key: headerSent, Value: binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))},
					}}
				}
				if err := prod.ProduceSync(gctx, recs...).FirstErr(); err != nil {
					return fmt.Errorf("produce to %s: %w", topic, err)
				}
			}
			bytesMu.Lock()
			res.Bytes += n
			bytesMu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	wait := time.NewTimer(cfg.DrainTimeout)
	defer wait.Stop()
	select {
	case err := <-consumed:
		if err != nil {
			return res, err
		}
	case <-wait.C:
		stopConsuming()
		if err := <-consumed; err != nil && !errors.Is(err, context.Canceled) {
			return res, err
		}
		return res, fmt.Errorf("consumed %d of %d records within %s", len(samples), res.Records, cfg.DrainTimeout)
	}
	if r.brokerPID != 0 {
		res.BrokerCPU = cpuOf(r.brokerPID) - b0
	}
	res.LoadCPU = cpuOf(os.Getpid()) - l0
	res.RequestBytes = delta(bytes0, counts.ByteCounts())
	res.Consumed = len(samples)
	res.Elapsed = last.Sub(start)
	res.samples = samples
	res.Latency = latencies(samples)
	return res, nil
}

// compressionOf returns the producer codec that canon serve's args set
// with --kafka-option compression.type=…, the last one winning, or the
// default of Canon's clients.
func compressionOf(args []string) (kgo.CompressionCodec, error) {
	name := ""
	for i, a := range args {
		var opt string
		switch {
		case a == "--kafka-option" && i+1 < len(args):
			opt = args[i+1]
		case strings.HasPrefix(a, "--kafka-option="):
			opt = strings.TrimPrefix(a, "--kafka-option=")
		}
		if v, ok := strings.CutPrefix(opt, "compression.type="); ok {
			name = v
		}
	}
	if name == "" {
		return kafka.DefaultCompression, nil
	}
	return kafka.CompressionCodec(name)
}
