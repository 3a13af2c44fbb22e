package kafka

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The embedded broker keeps topics and records across a restart on the
// same data dir, which is what `canon dev` promises.
func TestEmbeddedPersistsAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() *Embedded {
		t.Helper()
		e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	e := start()
	cl := newClient(t, e.Brokers())
	info, err := EnsureTopics(ctx, cl, TopicsConfig{Partitions: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Created) != 3 {
		t.Fatalf("created %v, want 3 topics", info.Created)
	}
	rec := &kgo.Record{Topic: info.Names.Mutations, Key: []byte("acme/roadmap"), Value: []byte("kept")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	e.Close()

	e = start()
	defer e.Close()
	cl = newClient(t, e.Brokers())
	info, err = EnsureTopics(ctx, cl, TopicsConfig{Partitions: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Created) != 0 || info.Partitions != 3 {
		t.Fatalf("after restart created %v with %d partitions; want the 3 existing topics", info.Created, info.Partitions)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.ConsumeTopics(info.Names.Mutations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollRecords(ctx, 10)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "kept" || recs[0].Partition != rec.Partition {
		t.Fatalf("after restart read %v, want the record written before", recs)
	}
}

func TestEmbeddedBusyPortSaysWhatToDo(t *testing.T) {
	e, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: e.Brokers()[0]})
	if err == nil || !strings.Contains(err.Error(), "--kafka-listen") || !strings.Contains(err.Error(), "--brokers") {
		t.Fatalf("got %v, want an error naming --kafka-listen and --brokers", err)
	}
}

// With AnyPortIfBusy a taken port (a Kafka of the laptop's own on 9092)
// moves the broker to a free one and says so; the data dir works on the
// new port, and on yet another one after a restart.
func TestEmbeddedBusyPortMovesToAFreeOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: taken.Addr().String(), AnyPortIfBusy: true})
	if err != nil {
		t.Fatal(err)
	}
	if e.Busy() != taken.Addr().String() || e.Brokers()[0] == taken.Addr().String() {
		e.Close()
		t.Fatalf("busy %q, brokers %v; want the broker moved off %s", e.Busy(), e.Brokers(), taken.Addr())
	}
	cl := newClient(t, e.Brokers())
	info, err := EnsureTopics(ctx, cl, TopicsConfig{Partitions: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: info.Names.Mutations, Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	e.Close()

	e, err = StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0", AnyPortIfBusy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Busy() != "" {
		t.Fatalf("a free port reported busy: %q", e.Busy())
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.ConsumeTopics(info.Names.Mutations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollRecords(ctx, 10)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "kept" {
		t.Fatalf("after a restart on another port read %v, want the record written before", recs)
	}
}
