package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/chserver"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
)

// TestRunSmall runs the load generator tiny against the real servers and
// checks that what it reports was really pushed, delivered and stored,
// that its outputs are written, and that it leaves nothing behind.
func TestRunSmall(t *testing.T) {
	k := testenv.NewKafka(t)
	ch := testenv.NewClickHouse(t)
	bin := filepath.Join(t.TempDir(), "canon")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/canon-sync/canon/cmd/canon").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const clients, perClient = 3, 20
	rep, err := Run(ctx, Config{
		Brokers: k.Brokers, ClickHouse: ch.Addr, Canon: bin,
		Clients: clients, Projects: 2, Mutations: perClient, Batch: 6,
		LargeMin: 8 << 10, LargeMax: 16 << 10,
		// Enough large puts and splices to happen in 60 mutations.
		Mix:        Mix{Put: 30, Patch: 20, Splice: 20, LargeSplice: 20, LargePut: 10},
		Partitions: 3, Dir: dir,
		Profile: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"canon.cpu.pprof", "canon.allocs.pprof"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v (want a non-empty file)", f, err)
		}
	}
	const total = clients * perClient
	c, raw := rep.Canon, rep.Raw
	// Every mutation is written once and applies. The push's ?wait=applied
	// answer may still call a few of them duplicates: the producer can
	// settle a wait as a duplicate while the version that applied it is
	// still on its way from the changelog tail (a race in producer/watch.go
	// that this load generator found). The websockets and ClickHouse below
	// say what really happened.
	if c.Mutations != total || c.Applied+c.Duplicates != total || c.Errors != 0 {
		t.Errorf("decided %d (applied %d, errors %d, duplicates %d), want %d applied", c.Mutations, c.Applied, c.Errors, c.Duplicates, total)
	}
	if c.WebsocketMutations != total || c.PushToWebsocket.N != total || c.PushToApplied.N != total {
		t.Errorf("websockets showed %d mutations (%d latencies, %d push answers), want %d", c.WebsocketMutations, c.PushToWebsocket.N, c.PushToApplied.N, total)
	}
	if c.ClickHouseMutations != total || c.ClickHouseApplied != total || c.ClickHouseVersions != uint64(c.WebsocketVersions) || c.ClickHouseLag.N != c.WebsocketVersions {
		t.Errorf("ClickHouse holds %d mutations (%d applied) and %d versions (%d lags), websockets showed %d versions; want %d applied mutations",
			c.ClickHouseMutations, c.ClickHouseApplied, c.ClickHouseVersions, c.ClickHouseLag.N, c.WebsocketVersions, total)
	}
	if c.Pushes < clients*perClient/6 || c.ArgsBytes < 8<<10 || c.CPU <= 0 || c.PeakRSS <= 0 || c.Allocated <= 0 {
		t.Errorf("implausible Canon figures: %d pushes, %d args bytes, CPU %s, peak RSS %d, allocated %.0f", c.Pushes, c.ArgsBytes, c.CPU, c.PeakRSS, c.Allocated)
	}
	if raw.Records != total || raw.Consumed != total || raw.Latency.N != total || raw.Bytes < c.ArgsBytes {
		t.Errorf("raw baseline: %d records, %d consumed, %d latencies, %d bytes; want %d records of at least %d bytes",
			raw.Records, raw.Consumed, raw.Latency.N, raw.Bytes, total, c.ArgsBytes)
	}
	if p := c.PushToWebsocket; p.P50 <= 0 || p.P50 > p.P99 || p.P99 > p.P999 || p.P999 > p.Max {
		t.Errorf("push → websocket percentiles out of order: %+v", p)
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("| mutations | %d | %d | |", total, total); !strings.Contains(md.String(), want) {
		t.Errorf("markdown lacks %q:\n%s", want, md.String())
	}
	// A ClickHouse on this machine (testenv's) has its CPU time measured.
	if brokerPID([]string{ch.Addr}) != 0 {
		t.Logf("ClickHouse's CPU time during Canon's run: %s", c.ClickHouseCPU)
		if c.ClickHouseCPU <= 0 || !strings.Contains(md.String(), "| CPU per mutation (ms, the ClickHouse server during Canon's run) |") {
			t.Errorf("ClickHouse's CPU time: %s, and the report's row:\n%s", c.ClickHouseCPU, md.String())
		}
	}
	// The server's own counters cover the projector's inserts of the run.
	if e := c.ClickHouseEvents; e["InsertQuery"] == 0 || e["InsertedRows"] < uint64(total) || e["InsertedBytes"] == 0 {
		t.Errorf("ClickHouse's counters over Canon's run: %v; want INSERTs of at least %d rows", e, total)
	}
	// The load generator's own CPU: its clients and websockets during
	// Canon's run, its producers and consumer during the baseline's.
	if c.LoadCPU <= 0 || raw.LoadCPU <= 0 || !strings.Contains(md.String(), "| CPU per mutation (ms, the load generator itself") {
		t.Errorf("the load generator's CPU: %s during Canon's run, %s during the baseline's; report:\n%s", c.LoadCPU, raw.LoadCPU, md.String())
	}
	// The bytes through the broker: the sequencer produces versions and
	// fetches mutations, the baseline produces and fetches its records.
	if w := c.RequestBytes["canon-sequencer Produce write"]; w <= 0 {
		t.Errorf("the sequencer's produce requests: %.0f bytes in %v", w, c.RequestBytes)
	}
	if r := c.RequestBytes["canon-sequencer Fetch read"]; r <= 0 {
		t.Errorf("the sequencer's fetch responses: %.0f bytes in %v", r, c.RequestBytes)
	}
	if w, r := rep.Raw.RequestBytes["raw-producer Produce write"], rep.Raw.RequestBytes["raw-consumer Fetch read"]; w <= 0 || r <= 0 {
		t.Errorf("the baseline's produce requests %.0f bytes, fetch responses %.0f in %v", w, r, rep.Raw.RequestBytes)
	}
	if s := rep.Summary(); s.BrokerIn <= 0 || s.BrokerOut <= 0 || s.RawIn <= 0 || s.RawOut <= 0 {
		t.Errorf("summary's broker KB per mutation: %+v", s)
	}
	if !strings.Contains(md.String(), "| Kafka KB per mutation sent to / received from the brokers, by canon's client and request | ") {
		t.Errorf("no row of Kafka bytes in the report:\n%s", md.String())
	}
	pngPath := filepath.Join(dir, "latency.png")
	if err := rep.SavePlot(pngPath); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 200 {
		t.Errorf("the plot is %dx%d", b.Dx(), b.Dy())
	}
	if st, err := os.Stat(filepath.Join(dir, "canon.log")); err != nil || st.Size() == 0 {
		t.Errorf("canon's log was not kept in the output dir: %v", err)
	}

	// Nothing left behind: no topic of the run, no group, no database.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, rep.TopicPrefix) {
			t.Errorf("topic %s was left behind", name)
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups() {
		if strings.HasPrefix(g, rep.TopicPrefix) {
			t.Errorf("group %s was left behind", g)
		}
	}
	conn, err := clickhouse.Open(chserver.Options(ch.Addr, "default"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", rep.Database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s was left behind", rep.Database)
	}
}

// TestGeneratorIsDeterministic: the baseline replays the records Canon
// got by making them again with the same seed.
func TestGeneratorIsDeterministic(t *testing.T) {
	mk := func(seed uint64) [][]op {
		g := newGenerator(seed, "c1", DefaultMix, 10, 1<<10, 4<<10)
		var out [][]op
		for range 30 {
			out = append(out, g.nextBatch())
		}
		return out
	}
	if a, b := mk(7), mk(7); !reflect.DeepEqual(a, b) {
		t.Fatal("two generators with the same seed made different mutations")
	}
	if a, b := mk(7), mk(8); reflect.DeepEqual(a, b) {
		t.Fatal("generators with different seeds made the same mutations")
	}
}

// TestGeneratorBatchBytes: a push stays far under the 4 MiB body limit
// even when the batch is all large puts.
func TestGeneratorBatchBytes(t *testing.T) {
	g := newGenerator(1, "c1", Mix{LargePut: 1}, 100, 500<<10, 900<<10)
	for range 5 {
		ops := g.nextBatch()
		size := 0
		for _, o := range ops {
			size += len(o.args)
		}
		if size > maxBatchBytes+900<<10+1<<10 || len(ops) == 100 {
			t.Fatalf("a batch of %d large puts holds %d bytes", len(ops), size)
		}
	}
}

func TestConfigErrorsSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ClickHouse: "x", Canon: "c"}, "--brokers"},
		{Config{Brokers: []string{"b"}, Canon: "c"}, "--clickhouse"},
		{Config{Brokers: []string{"b"}, ClickHouse: "x"}, "--canon"},
		{Config{Brokers: []string{"b"}, ClickHouse: "x", Canon: "c", Clients: 2, Projects: 3}, "no more projects than clients"},
		{Config{Brokers: []string{"b"}, ClickHouse: "x", Canon: "c", LargeMax: 2 << 20}, "900 KiB"},
		{Config{Brokers: []string{"b"}, ClickHouse: "x", Canon: "c", Batch: 5000}, "1 to 1000"},
		{Config{Brokers: []string{"b"}, ClickHouse: "x", Canon: "c", Mix: Mix{Put: -1}}, "weights"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// The baseline compresses with the codec canon serve's args give its
// clients, Canon's default without one.
func TestCompressionOf(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "snappy"},
		{[]string{"--kafka-option", "compression.type=snappy"}, "snappy"},
		{[]string{"--kafka-option", "compression.type=zstd"}, "zstd"},
		{[]string{"--kafka-option=compression.type=lz4", "--producer-rounds=false"}, "lz4"},
		{[]string{"--kafka-option", "compression.type=none", "--kafka-option", "client.rack=a"}, "none"},
	} {
		got, err := compressionOf(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := kafka.CompressionCodec(tc.want)
		if got != want {
			t.Errorf("%q: codec %v, want %s", tc.args, got, tc.want)
		}
	}
	if _, err := compressionOf([]string{"--kafka-option", "compression.type=brotli"}); err == nil {
		t.Error("compression.type=brotli was accepted")
	}
}
