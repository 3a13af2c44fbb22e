package history

// The fixture of the integration tests: Canon's topics under a unique
// prefix on the real broker, mutation records produced as the ingest
// produces them (with chosen timestamps), the real sequencer deciding them
// in this process, and a reader of what canon.versions then holds. The
// version records the projector reads are therefore genuine.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	brokers []string
	prefix  string
	info    kafka.TopicsInfo
	cl      *kgo.Client
	ch      *testenv.ClickHouse
	db      string
}

func newFixture(t testing.TB, ctx context.Context, partitions int32) *fixture {
	t.Helper()
	k := testenv.NewKafka(t)
	ch := testenv.NewClickHouse(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		kgo.MaxBufferedRecords(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &fixture{brokers: k.Brokers, prefix: k.Topic(t, "") + ".", cl: cl, ch: ch, db: ch.Database(t)}
	f.info, err = kafka.EnsureTopics(ctx, cl, kafka.TopicsConfig{
		Names: kafka.DefaultTopicNames().WithPrefix(f.prefix), Partitions: partitions, ReplicationFactor: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) kcfg() kafka.ClientConfig { return kafka.ClientConfig{Brokers: f.brokers} }

// mut is a mutation to produce and the Kafka timestamp it gets (what the
// sequencer stamps its version with).
type mut struct {
	schemas.Mutation
	at time.Time
}

// produce writes mutation records keyed and partitioned as the ingest
// does.
func (f *fixture) produce(t testing.TB, ctx context.Context, ms []mut) {
	t.Helper()
	rs := make([]*kgo.Record, 0, len(ms))
	for i := range ms {
		m := &ms[i].Mutation
		if m.Branch == "" {
			m.Branch = "main"
		}
		v, err := schemas.EncodeMutation(m, schemas.DefaultLimits())
		if err != nil {
			t.Fatalf("encode mutation %d: %v", i, err)
		}
		key := schemas.ProjectKey(m.Org, m.Project)
		rs = append(rs, &kgo.Record{Topic: f.info.Names.Mutations, Key: key, Value: v,
			Partition: schemas.Partition(key, f.info.Partitions), Timestamp: ms[i].at,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}})
	}
	if err := f.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce mutations: %v", err)
	}
}

// runSequencer runs the real sequencer in this process until the test
// ends, and returns its store: what the read API serves.
func (f *fixture) runSequencer(t testing.TB, ctx context.Context) *store.Store {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), Partitions: f.info.Partitions})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := sequencer.New(sequencer.Config{Kafka: f.kcfg(), Topics: f.info.Names, Store: st,
		Group: f.prefix + "sequencer", SessionTimeout: 3 * time.Second,
		Bundles: model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
			b, err := bundle.Compile(src, bundle.Options{})
			if err != nil {
				return nil, err
			}
			return b, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- seq.Run(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && sctx.Err() == nil {
			t.Errorf("sequencer: %v", err)
		}
		st.Close()
	})
	return st
}

// changelogContent is what canon.versions holds, read_committed.
type changelogContent struct {
	versions []*schemas.Version
	// chunkBytes are the bytes of chunk records per org/project.
	chunkBytes map[string]int64
	chunks     int
	// sizes are the chunk sizes by org/project + hash.
	sizes map[string]int64
}

// readVersions reads canon.versions from the start until it holds n
// version records.
func (f *fixture) readVersions(t testing.TB, ctx context.Context, n int) changelogContent {
	t.Helper()
	tail, err := changelog.New(changelog.Config{Kafka: f.kcfg(), Topics: f.info.Names,
		PartitionCount: f.info.Partitions, FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	c := changelogContent{chunkBytes: map[string]int64{}, sizes: map[string]int64{}}
	for len(c.versions) < n {
		evs, err := tail.Poll(ctx)
		if err != nil {
			t.Fatalf("read %s: %v after %d of %d versions", f.info.Names.Versions, err, len(c.versions), n)
		}
		for _, ev := range evs {
			switch {
			case ev.Err != nil:
				t.Fatalf("changelog record at %d/%d: %v", ev.Partition, ev.Offset, ev.Err)
			case ev.Version != nil:
				c.versions = append(c.versions, ev.Version)
			case ev.Chunk != nil:
				c.chunkBytes[ev.Chunk.Org+"/"+ev.Chunk.Project] += int64(len(ev.Chunk.Data))
				c.sizes[ev.Chunk.Org+"/"+ev.Chunk.Project+ev.Chunk.Hash] = int64(len(ev.Chunk.Data))
				c.chunks++
			}
		}
	}
	if len(c.versions) != n {
		t.Fatalf("%s holds %d versions, want %d", f.info.Names.Versions, len(c.versions), n)
	}
	return c
}

// projectorConfig is the in-process projector's config on the fixture.
func (f *fixture) projectorConfig(t testing.TB) Config {
	return Config{
		Kafka:         kafka.ClientConfig{Brokers: f.brokers, ClientID: "projector-test"},
		Topics:        f.info.Names,
		Group:         f.prefix + DefaultGroup,
		ClickHouse:    ClickHouseConfig{Addr: []string{f.ch.Addr}, Database: f.db},
		BatchInterval: 100 * time.Millisecond,
		LagInterval:   200 * time.Millisecond,
		Log:           testLogger(t),
	}
}

// runProjector runs an in-process projector until the test ends.
func runProjector(t testing.TB, ctx context.Context, cfg Config) *Projector {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	})
	return p
}

// queryStrings runs a query and returns its rows with every value
// formatted by fmt.Sprint (dates as 2006-01-02, times in UTC).
func queryStrings(t testing.TB, ctx context.Context, f *fixture, query string) [][]string {
	t.Helper()
	conn := f.ch.Conn(t, f.db)
	rs, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatalf("query %s: %v", query, err)
	}
	defer rs.Close()
	cts := rs.ColumnTypes()
	var out [][]string
	for rs.Next() {
		vals := make([]any, len(cts))
		for i, ct := range cts {
			vals[i] = newScanValue(ct.ScanType())
		}
		if err := rs.Scan(vals...); err != nil {
			t.Fatalf("scan %s: %v", query, err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = formatValue(cts[i].DatabaseTypeName(), v)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("query %s: %v", query, err)
	}
	return out
}

// waitCount waits until a query's single count reaches want.
func waitCount(t testing.TB, ctx context.Context, f *fixture, query string, want uint64) {
	t.Helper()
	conn := f.ch.Conn(t, f.db)
	var got uint64
	for {
		// Errors are retried: the projector may not have created the
		// tables yet.
		err := conn.QueryRow(ctx, query).Scan(&got)
		if err == nil && got == want {
			return
		}
		if err == nil && got > want {
			t.Fatalf("%s = %d, want %d", query, got, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s = %d (at %d, last error %v)", query, want, got, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() || os.Getenv("CANON_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sqlFor(db, query string) string { return strings.ReplaceAll(query, "canon.", db+".") }

func newScanValue(t reflect.Type) any { return reflect.New(t).Interface() }

// formatValue formats a scanned value: Dates as 2006-01-02, DateTimes as
// 2006-01-02 15:04:05 in UTC, floats with up to 4 decimals.
func formatValue(dbType string, v any) string {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "NULL"
		}
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case time.Time:
		if dbType == "Date" {
			return x.UTC().Format("2006-01-02")
		}
		return x.UTC().Format("2006-01-02 15:04:05")
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	default:
		return fmt.Sprint(x)
	}
}

func newClickHouse(t testing.TB) *testenv.ClickHouse { return testenv.NewClickHouse(t) }

// lagZero reports whether the projector group has committed every
// partition of the versions topic up to its end.
func lagZero(t testing.TB, ctx context.Context, f *fixture) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lag, err := GroupLag(ctx, kadm.NewClient(cl), f.prefix+DefaultGroup, f.info.Names.Versions)
	if err != nil {
		return false
	}
	for _, l := range lag {
		if l != 0 {
			return false
		}
	}
	return len(lag) == int(f.info.Partitions)
}

func testutilValue(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}
