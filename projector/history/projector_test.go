package history

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

func TestDiffScalars(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur scalarSet
		want      []scalarDiff
	}{
		{"first version", nil, scalarSet{"name": `"a"`}, []scalarDiff{{"name", ScalarSet, `"a"`, ""}}},
		{"unchanged", scalarSet{"name": `"a"`}, scalarSet{"name": `"a"`}, nil},
		{"changed", scalarSet{"name": `"a"`}, scalarSet{"name": `"b"`}, []scalarDiff{{"name", ScalarSet, `"b"`, `"a"`}}},
		{"deleted", scalarSet{"name": `"a"`, "x": "1"}, scalarSet{"x": "1"}, []scalarDiff{{"name", ScalarDelete, "", `"a"`}}},
		{"sorted by name", nil, scalarSet{"b": "2", "a": "1"}, []scalarDiff{{"a", ScalarSet, "1", ""}, {"b", ScalarSet, "2", ""}}},
		{"set null is a value", scalarSet{"a": "1"}, scalarSet{"a": "null"}, []scalarDiff{{"a", ScalarSet, "null", "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := diffScalars(tc.prev, tc.cur); !slices.Equal(got, tc.want) {
				t.Fatalf("diffScalars = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScalarSetJSONRoundTrip(t *testing.T) {
	in := map[string]json.RawMessage{"b": json.RawMessage(`{ "x" : [1, 2] }`), "a": json.RawMessage(`"é\"q"`)}
	set, text, err := compactScalars(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"é\"q","b":{"x":[1,2]}}`; text != want {
		t.Fatalf("scalars JSON = %s, want %s", text, want)
	}
	back, err := parseScalarSet(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back["a"] != set["a"] || back["b"] != set["b"] {
		t.Fatalf("parsed back %v, want %v", back, set)
	}
}

func TestMigrationsParse(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 {
		t.Fatalf("migrations = %v, want 0001 first", ms)
	}
	for _, m := range ms {
		for _, st := range m.Statements {
			if !strings.Contains(st, "{db}.") {
				t.Errorf("migration %04d: statement without {db}: %.80s", m.Version, st)
			}
			// ADD COLUMN is made idempotent by Migrate; MODIFY COLUMN is.
			if !strings.Contains(st, "IF NOT EXISTS") && !addColumn.MatchString(st) && !modifyColumn.MatchString(st) {
				t.Errorf("migration %04d: statement that is not idempotent: %.80s", m.Version, st)
			}
		}
	}
	if got := splitStatements("-- c\nA;\n\nB\n  x;\nC"); !slices.Equal(got, []string{"A", "B\n  x", "C"}) {
		t.Fatalf("splitStatements = %q", got)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Kafka: kafka.ClientConfig{Brokers: []string{"k:9092"}}, Topics: kafka.DefaultTopicNames(),
		ClickHouse: ClickHouseConfig{Addr: []string{"ch:9000"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no clickhouse", func(c *Config) { c.ClickHouse.Addr = nil }, "--clickhouse"},
		{"http url", func(c *Config) { c.ClickHouse.Addr = []string{"http://ch:8123"} }, "native protocol"},
		{"bad database", func(c *Config) { c.ClickHouse.Database = "canon-prod" }, "database"},
		{"no brokers", func(c *Config) { c.Kafka.Brokers = nil }, "--brokers"},
		{"negative batch", func(c *Config) { c.BatchRows = -1 }, "batch rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// Migrate creates the tables once and records it; a second run applies
// nothing.
func TestMigrateIsIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFixtureClickHouseOnly(t)
	conn, err := ClickHouseConfig{Addr: []string{f.ch.Addr}, Database: f.db}.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kept := map[string]bool{}
	for round, wantApplied := range []bool{true, false} {
		res, err := Migrate(ctx, conn, f.db)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, r := range res {
			if r.Applied != wantApplied {
				t.Fatalf("round %d: migration %04d applied = %v, want %v", round, r.Version, r.Applied, wantApplied)
			}
			for _, c := range r.Kept {
				kept[c] = true
			}
		}
	}
	// 18.16 alters no key column: the partition keys' times keep DateTime.
	for c := range kept {
		if !slices.Contains([]string{"versions.ts", "mutations.applied_at", "item_changes.ts", "scalar_changes.ts"}, c) {
			t.Errorf("the server kept the type of %s", c)
		}
	}
	got := queryStrings(t, ctx, f, "SELECT name FROM system.tables WHERE database = '"+f.db+"' ORDER BY name")
	want := [][]string{{"bodies"}, {"branches"}, {"chunks"}, {"client_activity_daily"}, {"client_activity_daily_mv"}, {"item_changes"}, {"mutations"},
		{"scalar_changes"}, {"schema_migrations"}, {"versions"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("tables = %v, want %v", got, want)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, ctx, f, "schema_migrations"); n != uint64(len(ms)) {
		t.Fatalf("schema_migrations holds %d rows, want %d", n, len(ms))
	}
	// Every statement again, as after a migration interrupted before it
	// was recorded.
	if err := conn.Exec(ctx, "TRUNCATE TABLE "+f.db+".schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, conn, f.db); err != nil {
		t.Fatalf("every migration applied a second time: %v", err)
	}
	columns := "SELECT table, name, type FROM system.columns WHERE database = '" + f.db + "' ORDER BY table, name"
	oldColumns := queryStrings(t, ctx, f, columns)

	// The same on a current ClickHouse: the same tables and columns.
	cur := testenv.NewCurrentClickHouse(t)
	for round, wantApplied := range []bool{true, false} {
		res, err := MigrateSession(ctx, cur, f.db)
		if err != nil {
			t.Fatalf("ClickHouse %s, round %d: %v", cur.Version, round, err)
		}
		for _, r := range res {
			if r.Applied != wantApplied {
				t.Fatalf("ClickHouse %s, round %d: migration %04d applied = %v, want %v", cur.Version, round, r.Version, r.Applied, wantApplied)
			}
			if len(r.Kept) > 0 {
				t.Fatalf("ClickHouse %s kept the types of %v", cur.Version, r.Kept)
			}
		}
	}
	if err := cur.Exec(ctx, "TRUNCATE TABLE "+f.db+".schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if _, err := MigrateSession(ctx, cur, f.db); err != nil {
		t.Fatalf("ClickHouse %s: every migration applied a second time: %v", cur.Version, err)
	}
	newColumns, err := cur.Query(ctx, columns)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range newColumns {
		if kept[c[0]+"."+c[1]] && c[2] == "DateTime('UTC')" {
			c[2] = "DateTime"
		}
	}
	if !slices.EqualFunc(oldColumns, newColumns, slices.Equal) {
		t.Fatalf("the migrations made other columns on ClickHouse 18.16 and %s:\n%v\n%v", cur.Version, oldColumns, newColumns)
	}
	// A recorded migration whose content changed is refused.
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+f.db+".schema_migrations (version, name, checksum, applied_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(uint32(1), "history_tables", "0000", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "OPTIMIZE TABLE "+f.db+".schema_migrations FINAL"); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, conn, f.db); err == nil || !strings.Contains(err.Error(), "another content") {
		t.Fatalf("Migrate after a changed checksum = %v, want a refusal", err)
	}
}

func newFixtureClickHouseOnly(t *testing.T) *fixture {
	f := &fixture{}
	f.ch = newClickHouse(t)
	f.db = f.ch.Database(t)
	return f
}

// Records of canon.versions the projector cannot handle go to
// canon.rejected with reason projection, and the projector goes on with
// the records after them.
func TestUnhandledRecordsAreRejected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 1)
	bad := []*kgo.Record{
		{Key: []byte("acme/p"), Value: []byte("not json"), Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}},
		{Key: []byte("acme/p"), Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte("version/v9")}}},
		{Key: []byte("acme/p"), Value: []byte(`{}`)},
		{Key: []byte("acme/p"), Value: []byte("chunk"), Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)},
			{Key: schemas.HeaderChunkHash, Value: []byte(strings.Repeat("0", 64))}}},
	}
	// Versions before and after the bad records (the sequencer restores
	// its partition before it decides anything, so the bad records go in
	// once it runs).
	ms := scenario(t)[:10]
	f.produce(t, ctx, ms[:6])
	f.runSequencer(t, ctx)
	f.readVersions(t, ctx, 6)
	for _, r := range bad {
		r.Topic, r.Partition = f.info.Names.Versions, schemas.Partition([]byte("acme/roadmap"), f.info.Partitions)
	}
	if err := f.cl.ProduceSync(ctx, bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f.produce(t, ctx, ms[6:])
	p := runProjector(t, ctx, f.projectorConfig(t))
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".versions FINAL", uint64(len(ms)))

	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ConsumeTopics(f.info.Names.Rejected),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*schemas.Rejected
	for len(got) < len(bad) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d rejected records, want %d", len(got), len(bad))
		}
		fs.EachRecord(func(r *kgo.Record) {
			var schema string
			for _, h := range r.Headers {
				if h.Key == schemas.HeaderSchema {
					schema = string(h.Value)
				}
			}
			rej, err := schemas.DecodeRejected(schema, r.Value, schemas.Limits{})
			if err != nil {
				t.Fatalf("rejected record at %d: %v", r.Offset, err)
			}
			if string(r.Key) != "acme/p" {
				t.Errorf("rejected record key %q, want the source's", r.Key)
			}
			got = append(got, rej)
		})
	}
	slices.SortFunc(got, func(a, b *schemas.Rejected) int { return int(a.Offset - b.Offset) })
	for i, rej := range got {
		if rej.Reason != schemas.ReasonProjection || rej.Topic != f.info.Names.Versions || rej.Partition != bad[i].Partition || rej.Offset != bad[i].Offset ||
			!strings.HasPrefix(rej.Message, "history projector: ") || string(rej.Value) != string(bad[i].Value) {
			t.Errorf("rejected record %d = %+v", i, rej)
		}
	}
	// The bad records are committed past: the group's lag reaches 0.
	for {
		c := p.Committed()
		if c[bad[0].Partition] > bad[len(bad)-1].Offset && lagZero(t, ctx, f) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("committed %v, lag not 0", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := testutilValue(t, p.m.rejected); got != float64(len(bad)) {
		t.Fatalf("canon_projector_rejected_total = %v, want %d", got, len(bad))
	}
}

// One poll can return thousands of versions; the projector must still
// insert batches of about BatchRows rows, not one batch of everything.
func TestBatchesAreCutByRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 2)
	const versions = 300
	recs := benchVersions(versions, 2) // 7 rows a version
	for _, r := range recs {
		r.Topic = f.info.Names.Versions
	}
	if err := f.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := f.projectorConfig(t)
	cfg.BatchRows = 140
	cfg.BatchInterval = time.Minute // only full batches and the final flush cut batches
	p := runProjector(t, ctx, cfg)
	const total = versions * 7
	for p.inserted.Load() < int64(total-cfg.BatchRows) {
		if ctx.Err() != nil {
			t.Fatalf("inserted %d of %d rows", p.inserted.Load(), total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every batch is full: at least 140 rows and at most one version (7
	// rows) more. The counter counts committed batches, which may trail
	// the inserted rows by one.
	batches := int(testutilValue(t, p.m.batches))
	inserted := int(p.inserted.Load())
	if min, max := inserted/(cfg.BatchRows+7)-1, inserted/cfg.BatchRows; batches < min || batches > max {
		t.Fatalf("%d rows in %d batches; want %d to %d batches of %d rows", inserted, batches, min, max, cfg.BatchRows)
	}
}

// With large items a batch is cut by its bytes, not its rows: a batch is
// inserted once its bodies, chunks and args reach BatchBytes.
func TestBatchesAreCutByBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 2)
	const versions = 300
	recs := benchVersions(versions, 2)
	// The bytes of the chunk records and args: a lower bound of what the
	// batches hold, to size them.
	least := 0
	for _, r := range recs {
		r.Topic = f.info.Names.Versions
		least += len(r.Value)
	}
	if err := f.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := f.projectorConfig(t)
	cfg.BatchRows = 1 << 30
	cfg.BatchBytes = least / 40
	cfg.BatchInterval = 3 * time.Second // only the last batch waits for it
	p := runProjector(t, ctx, cfg)
	const rows = versions * 7
	for p.inserted.Load() < rows {
		if ctx.Err() != nil {
			t.Fatalf("inserted %d of %d rows", p.inserted.Load(), rows)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// What the tables got of bodies, chunks and args: full batches hold
	// at least BatchBytes of it, and less than BatchBytes and one
	// version's records more; then the last one, whose commit the counter
	// may trail.
	sent := 0
	for _, q := range []string{"SELECT sum(length(body)) FROM bodies FINAL", "SELECT sum(length(data)) FROM chunks FINAL", "SELECT sum(length(args)) FROM mutations FINAL"} {
		n, err := strconv.Atoi(queryStrings(t, ctx, f, q)[0][0])
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	most := 3 * 2 * 400 // a version: 3 chunks and bodies of about 300 bytes, small args
	batches := int(testutilValue(t, p.m.batches))
	t.Logf("%d bytes of bodies, chunks and args in %d batches of %d bytes", sent, batches, cfg.BatchBytes)
	if lo, hi := sent/(cfg.BatchBytes+most)-1, sent/cfg.BatchBytes+1; batches < lo || batches > hi {
		t.Fatalf("%d bytes of bodies, chunks and args in %d batches of %d bytes; want %d to %d batches", sent, batches, cfg.BatchBytes, lo, hi)
	}
}
