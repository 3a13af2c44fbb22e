package changelog

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// The tail hands over committed records only, decoded, in offset order,
// and reports records that do not decode instead of stopping.
func TestTailReadsCommittedRecordsDecoded(t *testing.T) {
	emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(emb.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	info, err := kafka.EnsureTopics(ctx, admin, kafka.TopicsConfig{Partitions: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(emb.Brokers()...), kgo.TransactionalID("tail-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	data := []byte(`{"title":"x"}`)
	chunkValue, chunkHash := schemas.EncodeChunk(&schemas.Chunk{Org: "acme", Project: "p", Data: data})
	version := func(v uint64) []byte {
		b, err := schemas.EncodeVersion(&schemas.Version{Org: "acme", Project: "p", Branch: "main", Version: v, Parent: v - 1,
			Scalars: map[string]json.RawMessage{}, Items: []schemas.ItemChange{}, LastIDs: map[string]uint64{"c": v},
			Mutations: []schemas.Outcome{{ClientGroup: "g", Client: "c", ID: v, Name: "project.set", Args: json.RawMessage(`{}`), Status: schemas.StatusApplied, Offset: int64(v)}},
			StateHash: strings.Repeat("0", 64), Source: schemas.SourceRef{Partition: 1, Offset: int64(v)}}, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hdr := func(schema string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schema)}}
	}
	key := schemas.ProjectKey("acme", "p")
	txn := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			r.Partition, r.Key = 1, key
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit,
		&kgo.Record{Topic: info.Names.Versions, Value: chunkValue,
			Headers: append(hdr(schemas.SchemaChunkV1), kgo.RecordHeader{Key: schemas.HeaderChunkHash, Value: []byte(chunkHash)})},
		&kgo.Record{Topic: info.Names.Versions, Value: version(1), Headers: hdr(schemas.SchemaVersionV1)})
	txn(kgo.TryAbort, &kgo.Record{Topic: info.Names.Versions, Value: version(2), Headers: hdr(schemas.SchemaVersionV1)})
	txn(kgo.TryCommit,
		&kgo.Record{Topic: info.Names.Versions, Value: []byte(`{`), Headers: hdr(schemas.SchemaVersionV1)},
		&kgo.Record{Topic: info.Names.Versions, Value: version(2), Headers: hdr(schemas.SchemaVersionV1)})

	tail, err := New(Config{Kafka: kafka.ClientConfig{Brokers: emb.Brokers()}, Topics: info.Names, PartitionCount: 2, FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	var got []Event
	for len(got) < 4 || func() bool { n, _ := tail.Next(info.Names.Versions, 1); return n < got[3].Offset+2 }() {
		evs, err := tail.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d events: %v", len(got), err)
		}
		got = append(got, evs...)
	}
	if len(got) != 4 {
		t.Fatalf("%d events, want 4 (chunk, version 1, undecodable, version 2): %+v", len(got), got)
	}
	if c := got[0].Chunk; c == nil || c.Hash != chunkHash || string(c.Data) != string(data) {
		t.Errorf("event 0 = %+v, want the chunk", got[0])
	}
	if v := got[1].Version; v == nil || v.Version != 1 {
		t.Errorf("event 1 = %+v, want version 1", got[1])
	}
	if got[2].Err == nil || got[2].Version != nil {
		t.Errorf("event 2 = %+v, want an undecodable record", got[2])
	}
	if v := got[3].Version; v == nil || v.Version != 2 || got[3].Offset <= got[1].Offset {
		t.Errorf("event 3 = %+v, want the committed version 2 after version 1", got[3])
	}
	for _, ev := range got {
		if ev.Partition != 1 || ev.Topic != info.Names.Versions {
			t.Errorf("event at %s/%d, want %s/1", ev.Topic, ev.Partition, info.Names.Versions)
		}
	}

	// The position counts the last commit marker: it is the end offset.
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, info.Names.Versions)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(info.Names.Versions, 1)
	if n, ok := tail.Next(info.Names.Versions, 1); !ok || n != end.Offset {
		t.Errorf("position %d, %v; want the end offset %d", n, ok, end.Offset)
	}

	// Start offsets resume exactly where asked.
	resumed, err := New(Config{Kafka: kafka.ClientConfig{Brokers: emb.Brokers()}, Topics: info.Names,
		Partitions: []int32{1}, Start: map[int32]int64{1: got[3].Offset}})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	evs, err := resumed.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Version == nil || evs[0].Version.Version != 2 {
		t.Fatalf("resumed at %d: %+v, want version 2 only", got[3].Offset, evs)
	}
}
