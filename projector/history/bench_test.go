package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/schemas"
)

// benchVersions makes n version records of a few projects: 2 mutations,
// 3 item puts and one changed scalar each, that is 7 rows; each version
// comes after the chunk records of its 3 new bodies (300 bytes each), as
// the sequencer writes them.
func benchVersions(n, partitions int) []*kgo.Record {
	const projects = 16
	heads := make([]uint64, projects)
	rs := make([]*kgo.Record, 0, n)
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range n {
		pi := i % projects
		heads[pi]++
		ver := heads[pi]
		project := fmt.Sprintf("bench%02d", pi)
		v := &schemas.Version{Org: "acme", Project: project, Branch: "main", Version: ver, Parent: ver - 1,
			TS:      base + int64(i),
			Scalars: map[string]json.RawMessage{"name": json.RawMessage(fmt.Sprintf(`"project %d"`, ver)), "owner": json.RawMessage(`"ann"`)},
			LastIDs: map[string]uint64{}, StateHash: hexHash(fmt.Sprint("state", i)),
			Source: schemas.SourceRef{Partition: int32(pi % partitions), Offset: int64(i)}}
		key := schemas.ProjectKey(v.Org, v.Project)
		for k := range 3 {
			data := fmt.Appendf(nil, `{"title":%q}`, fmt.Sprintf("%0290d", i*3+k))
			c := &schemas.Chunk{Org: v.Org, Project: v.Project, Hash: hexHash(string(data)), Data: data}
			value, hash := schemas.EncodeChunk(c)
			rs = append(rs, &kgo.Record{Key: key, Value: value, Partition: schemas.Partition(key, int32(partitions)),
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)}, {Key: schemas.HeaderChunkHash, Value: []byte(hash)}}})
			v.Items = append(v.Items, schemas.ItemChange{Collection: "tasks", ID: fmt.Sprintf("t%d-%d", ver%50, k), Op: schemas.OpPut,
				Meta: json.RawMessage(`{"owner":"ann"}`), Hash: c.Hash, Size: int64(len(data)), Chunks: []string{c.Hash}})
		}
		for m := range 2 {
			client := fmt.Sprintf("c%d", m)
			id := 2*ver - 1 + uint64(m)
			v.Mutations = append(v.Mutations, schemas.Outcome{ClientGroup: "g-" + client, Client: client, ID: id, Name: "item.put",
				Args:   json.RawMessage(fmt.Sprintf(`{"collection":"tasks","id":"t%d","data":{"title":"task %d"}}`, ver%50, i)),
				Status: schemas.StatusApplied, TS: base + int64(i) - 250, Principal: "user:" + client, ReceivedAt: base + int64(i) - 5, Offset: int64(2*i + m)})
			v.LastIDs[client] = id
		}
		value, err := schemas.EncodeVersion(v, schemas.Limits{})
		if err != nil {
			panic(err)
		}
		rs = append(rs, &kgo.Record{Key: key, Value: value, Partition: schemas.Partition(key, int32(partitions)),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}})
	}
	return rs
}

func hexHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// BenchmarkProjector measures, in each iteration, the projector's rows/s
// from canon.versions into the local ClickHouse (consume read_committed,
// decode, build rows, insert, commit; a fresh database and group each
// time) against raw clickhouse-go batch inserts of the same rows, both
// columnar (the projector's own insert without Kafka and decoding) and
// row by row with batch.Append. The projector's rate counts its full
// batches, from the first version it reads (the group join before it is
// reported apart). The projector's rows also count the bodies and
// chunks tables, which the raw inserts do not write: compare releases by
// projector-versions/s. Run it with -benchtime=1x -count=5 and take
// medians.
func BenchmarkProjector(b *testing.B) {
	const versions = 40_000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	f := newFixture(b, ctx, 4)
	recs := benchVersions(versions, 4)
	for _, r := range recs {
		r.Topic = f.info.Names.Versions
	}
	if err := f.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	// The same rows, built as the projector builds them.
	var batch rows
	prev := map[string]scalarSet{}
	for _, r := range recs {
		if string(r.Headers[0].Value) != schemas.SchemaVersionV1 {
			continue
		}
		v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		cur, curJSON, _ := compactScalars(v.Scalars)
		batch.addVersion(v, r.Partition, r.Offset, r.Timestamp.UnixMilli(), cur, curJSON, prev[v.Project], nil, nil)
		prev[v.Project] = cur
	}
	total := batch.len()
	// The projector also writes each body whole and its chunk.
	projTotal := total + 2*3*versions
	b.Logf("%d versions, %d rows (the projector's: %d)", versions, total, projTotal)

	b.ResetTimer()
	var projRates, versionRates, colRates, rowRates, joins []float64
	for i := range b.N {
		db := f.ch.Database(b)
		conn, err := ClickHouseConfig{Addr: []string{f.ch.Addr}, Database: db}.Open(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Migrate(ctx, conn, db); err != nil {
			b.Fatal(err)
		}
		w := &writer{conn: conn, db: db}
		// Raw, columnar, in batches of the projector's default size.
		t0 := time.Now()
		for _, part := range splitRows(&batch, DefaultBatchRows) {
			if err := w.insertAll(ctx, part); err != nil {
				b.Fatal(err)
			}
		}
		colRates = append(colRates, float64(total)/time.Since(t0).Seconds())

		// Raw, row by row, into a second database.
		db2 := f.ch.Database(b)
		if _, err := Migrate(ctx, conn, db2); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		for _, part := range splitRows(&batch, DefaultBatchRows) {
			if err := insertRowByRow(ctx, &writer{conn: conn, db: db2}, part); err != nil {
				b.Fatal(err)
			}
		}
		rowRates = append(rowRates, float64(total)/time.Since(t0).Seconds())

		// The projector, into a third database.
		db3 := f.ch.Database(b)
		if _, err := Migrate(ctx, conn, db3); err != nil {
			b.Fatal(err)
		}
		conn.Close()
		cfg := f.projectorConfig(b)
		cfg.Group = fmt.Sprintf("%sbench-%d", f.prefix, i)
		cfg.ClickHouse.Database = db3
		cfg.SkipMigrate = true
		cfg.BatchInterval = DefaultBatchInterval
		p, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		pctx, pcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		t0 = time.Now()
		go func() { done <- p.Run(pctx) }()
		// The last batch is partial: it waits for BatchInterval once the
		// topic is read, as it would for more versions in production. The
		// rate is therefore taken at the end of the last full batch.
		// Like the raw inserts, which start on an open connection, the
		// clock starts with the first version read, after the group join.
		var full int64
		var first, fullAt time.Duration
		for n := int64(0); n < int64(projTotal); {
			if ctx.Err() != nil {
				b.Fatalf("projector inserted %d of %d rows", p.inserted.Load(), projTotal)
			}
			time.Sleep(time.Millisecond)
			if first == 0 && testutil.ToFloat64(p.m.versions) > 0 {
				first = time.Since(t0)
			}
			if m := p.inserted.Load(); m != n {
				if m < int64(projTotal) {
					full, fullAt = m, time.Since(t0)
				}
				n = m
			}
		}
		if full == 0 {
			b.Fatalf("no full batch: %d rows in batches of %d", total, DefaultBatchRows)
		}
		projRates = append(projRates, float64(full)/(fullAt-first).Seconds())
		versionRates = append(versionRates, float64(full)/float64(projTotal)*versions/(fullAt-first).Seconds())
		joins = append(joins, first.Seconds()*1000)
		pcancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	pm, cm, rm := median(projRates), median(colRates), median(rowRates)
	b.ReportMetric(pm, "projector-rows/s")
	b.ReportMetric(median(versionRates), "projector-versions/s")
	b.ReportMetric(cm, "raw-columnar-rows/s")
	b.ReportMetric(rm, "raw-append-rows/s")
	b.ReportMetric(pm/cm, "ratio-columnar")
	b.ReportMetric(pm/rm, "ratio-append")
	b.ReportMetric(median(joins), "join-to-first-version-ms")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// splitRows cuts a batch into batches of at most n versions' rows.
func splitRows(b *rows, n int) []*rows {
	var out []*rows
	// Cut by versions: a version's rows go together, as in the projector.
	per := max(1, n/7)
	nv := len(b.versions.org)
	mi, ii, si := 0, 0, 0
	for from := 0; from < nv; from += per {
		to := min(from+per, nv)
		part := &rows{}
		sliceInto(&part.versions, &b.versions, from, to)
		mEnd := countUntil(b.mutations.version, b.mutations.org, b.mutations.project, mi, b.versions, to)
		iEnd := countUntil(b.items.version, b.items.org, b.items.project, ii, b.versions, to)
		sEnd := countUntil(b.scalars.version, b.scalars.org, b.scalars.project, si, b.versions, to)
		sliceInto(&part.mutations, &b.mutations, mi, mEnd)
		sliceInto(&part.items, &b.items, ii, iEnd)
		sliceInto(&part.scalars, &b.scalars, si, sEnd)
		mi, ii, si = mEnd, iEnd, sEnd
		out = append(out, part)
	}
	return out
}

// countUntil returns the end of the rows (from start) that belong to the
// versions before index to.
func countUntil(version []uint64, org, project []string, start int, vs versionRows, to int) int {
	if to == len(vs.org) {
		return len(version)
	}
	// Rows are appended version by version: stop at the first row of
	// version to.
	stop := struct {
		org, project string
		version      uint64
	}{vs.org[to], vs.project[to], vs.version[to]}
	i := start
	for i < len(version) && (org[i] != stop.org || project[i] != stop.project || version[i] != stop.version) {
		i++
	}
	return i
}

// sliceInto sets every column of dst to src's column [from:to].
func sliceInto[T any](dst, src *T, from, to int) {
	dv, sv := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range sv.NumField() {
		f := sv.Field(i)
		reflect.NewAt(f.Type(), dv.Field(i).Addr().UnsafePointer()).Elem().Set(
			reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().Slice(from, to))
	}
}

// insertRowByRow inserts a batch with batch.Append, one row at a time.
func insertRowByRow(ctx context.Context, w *writer, b *rows) error {
	for _, tc := range []struct {
		t    table
		cols []any
	}{
		{versionsTable, b.versions.columns()}, {mutationsTable, b.mutations.columns()},
		{itemsTable, b.items.columns()}, {scalarsTable, b.scalars.columns()},
	} {
		n := columnLen(tc.cols[0])
		if n == 0 {
			continue
		}
		batch, err := w.conn.PrepareBatch(ctx, "INSERT INTO "+w.db+"."+tc.t.name+" ("+joinColumns(tc.t.columns)+")")
		if err != nil {
			return err
		}
		vals := make([]reflect.Value, len(tc.cols))
		for i, c := range tc.cols {
			vals[i] = reflect.ValueOf(c)
		}
		row := make([]any, len(tc.cols))
		for r := range n {
			for i := range vals {
				row[i] = vals[i].Index(r).Interface()
			}
			if err := batch.Append(row...); err != nil {
				return err
			}
		}
		if err := batch.Send(); err != nil {
			return err
		}
	}
	return nil
}

func joinColumns(cs []string) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += ", "
		}
		out += c
	}
	return out
}
