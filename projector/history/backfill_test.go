package history

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

// A backfill runs against the embedded broker of `canon dev` (kfake),
// which answers GROUP_ID_NOT_FOUND for the offsets of a group that never
// committed, with a new group and with one given by name; its group is
// then deleted as the command does.
func TestBackfillEmbeddedBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch := newClickHouse(t)
	db := ch.Database(t)
	e, err := kafka.StartEmbedded(kafka.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info, err := kafka.EnsureTopics(ctx, cl, kafka.TopicsConfig{Names: kafka.DefaultTopicNames(), Partitions: 2, ReplicationFactor: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 puts a body whose chunk comes before it; version 3 one
	// whose chunk is nowhere (as in a database filled from the middle of
	// the changelog): its version is projected, without the body.
	key := schemas.ProjectKey("acme", "p")
	body := []byte(`{"done":true}`)
	chunk := &schemas.Chunk{Org: "acme", Project: "p", Hash: hexHash(string(body)), Data: body}
	chunkValue, chunkHash := schemas.EncodeChunk(chunk)
	var recs []*kgo.Record
	for v := uint64(1); v <= 3; v++ {
		ver := &schemas.Version{Org: "acme", Project: "p", Branch: "main", Version: v, Parent: v - 1,
			TS: time.Now().UnixMilli(), Scalars: map[string]json.RawMessage{"n": json.RawMessage(`1`)},
			Mutations: []schemas.Outcome{{ClientGroup: "g", Client: "c", ID: v, Name: "project.set", Args: json.RawMessage(`{"n":1}`),
				Status: schemas.StatusApplied, Offset: int64(v - 1)}},
			LastIDs: map[string]uint64{"c": v}, StateHash: strings.Repeat("0", 64), Source: schemas.SourceRef{Offset: int64(v - 1)},
		}
		switch v {
		case 2:
			recs = append(recs, &kgo.Record{Topic: info.Names.Versions, Key: key, Value: chunkValue, Partition: schemas.Partition(key, info.Partitions),
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)}, {Key: schemas.HeaderChunkHash, Value: []byte(chunkHash)}}})
			ver.Items = []schemas.ItemChange{{Collection: "tasks", ID: "t1", Op: schemas.OpPut, Meta: json.RawMessage(`{}`),
				Hash: chunk.Hash, Size: int64(len(body)), Chunks: []string{chunk.Hash}}}
		case 3:
			lost := hexHash("a body whose chunk is not in the changelog")
			ver.Items = []schemas.ItemChange{{Collection: "tasks", ID: "t2", Op: schemas.OpPut, Meta: json.RawMessage(`{}`),
				Hash: lost, Size: 10, Chunks: []string{lost}}}
		}
		val, err := schemas.EncodeVersion(ver, schemas.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: info.Names.Versions, Key: key, Value: val, Partition: schemas.Partition(key, info.Partitions),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"canon-projector-history-backfill-1", "named-by-the-user"} {
		cfg := Config{Kafka: kafka.ClientConfig{Brokers: e.Brokers()}, Topics: info.Names, Group: group,
			ClickHouse: ClickHouseConfig{Addr: []string{ch.Addr}, Database: db}, BatchInterval: 50 * time.Millisecond, Log: testLogger(t)}
		pr, err := Backfill(ctx, cfg, 50*time.Millisecond, func(Progress) {})
		if err != nil {
			t.Fatalf("backfill with group %s: %v", group, err)
		}
		if pr.Done != 4 || pr.Total != 4 {
			t.Fatalf("backfill with group %s ended at %+v, want 4 of 4 records", group, pr)
		}
		if err := DeleteGroup(ctx, cfg.Kafka, group); err != nil {
			t.Fatalf("delete group %s: %v", group, err)
		}
	}
	var n uint64
	if err := ch.Conn(t, db).QueryRow(ctx, "SELECT count() FROM "+db+".versions FINAL").Scan(&n); err != nil || n != 3 {
		t.Fatalf("versions holds %d rows (%v), want 3", n, err)
	}
	var got string
	if err := ch.Conn(t, db).QueryRow(ctx, "SELECT any(body) FROM "+db+".bodies FINAL").Scan(&got); err != nil || got != string(body) {
		t.Fatalf("bodies holds %q (%v), want the one body whose chunk was read, %s", got, err, body)
	}
	if err := ch.Conn(t, db).QueryRow(ctx, "SELECT count() FROM "+db+".bodies FINAL").Scan(&n); err != nil || n != 1 {
		t.Fatalf("bodies holds %d rows (%v), want 1", n, err)
	}
	groups, err := kadm.NewClient(cl).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.Groups()) != 0 {
		t.Fatalf("groups left behind: %v", groups.Groups())
	}
}
