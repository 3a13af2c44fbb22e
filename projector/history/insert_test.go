package history

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/chserver"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

func TestBlockEnd(t *testing.T) {
	// Row sizes: the strings of both string columns of a row.
	sizes := []int{10, 20, 30, 2000, 5, 5, 999, 1000, 1, 0, 0, 3000}
	a, b := make([]string, len(sizes)), make([]string, len(sizes))
	nums := make([]uint64, len(sizes))
	for i, n := range sizes {
		a[i] = strings.Repeat("a", n/2)
		b[i] = strings.Repeat("b", n-n/2)
	}
	cols := []any{a, nums, b}
	const limit = 1000
	var blocks [][2]int
	for start := 0; start < len(sizes); {
		end := blockEnd(cols, start, len(sizes), limit)
		if end <= start || end > len(sizes) {
			t.Fatalf("blockEnd(%d) = %d", start, end)
		}
		blocks = append(blocks, [2]int{start, end})
		start = end
	}
	want := [][2]int{{0, 3}, {3, 4}, {4, 6}, {6, 7}, {7, 8}, {8, 11}, {11, 12}}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Fatalf("blocks %v, want %v", blocks, want)
	}
	for _, bl := range blocks {
		sum := 0
		for _, n := range sizes[bl[0]:bl[1]] {
			sum += n
		}
		if sum > limit && bl[1]-bl[0] > 1 {
			t.Errorf("block %v has %d bytes in %d rows, over %d", bl, sum, bl[1]-bl[0], limit)
		}
	}
	if got := rowRange([]time.Time{{}, {}, {}}, 1, 3).([]time.Time); len(got) != 2 {
		t.Fatalf("rowRange of times: %d rows", len(got))
	}
}

// mixRows is a batch like the mix's in one projector batch: versions
// with mutations, item changes and scalars, and bodies of 100-500 KiB
// with their chunks.
func mixRows(bodies int) *rows {
	var b rows
	prev := map[string]scalarSet{}
	for _, r := range benchVersions(50, 4) {
		if string(r.Headers[0].Value) != schemas.SchemaVersionV1 {
			continue
		}
		v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.Limits{})
		if err != nil {
			panic(err)
		}
		cur, curJSON, _ := compactScalars(v.Scalars)
		b.addVersion(v, r.Partition, r.Offset, r.Timestamp.UnixMilli(), cur, curJSON, prev[v.Project], nil, nil)
		prev[v.Project] = cur
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range bodies {
		body := make([]byte, (100+rnd.IntN(400))<<10)
		for j := range body {
			body[j] = 'a' + byte(rnd.IntN(26))
		}
		project := fmt.Sprintf("p%d", i%4)
		b.bodies.add("acme", project, hexHash(string(body)), [][]byte{body[:1000], body[1000:]}, int64(i))
		chunk := body[:2048]
		b.chunks.add("acme", project, hexHash(string(chunk)), [][]byte{chunk}, int64(i))
	}
	return &b
}

// tableDigest is a table's row count and a sum of its rows' hashes.
func tableDigest(t testing.TB, ctx context.Context, w *writer, tb table) string {
	t.Helper()
	rs, err := w.conn.Query(ctx, "SELECT count(), sum(cityHash64("+strings.Join(tb.columns, ", ")+")) FROM "+w.db+"."+tb.name)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var n, sum uint64
	if !rs.Next() {
		t.Fatalf("digest of %s: no row", tb.name)
	}
	if err := rs.Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d rows, %x", n, sum)
}

// A batch inserted in small blocks holds exactly what one block holds,
// and each table gets one part per insert.
func TestInsertInBlocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch := newClickHouse(t)
	b := mixRows(12)
	var ws []*writer
	for _, limit := range []int{math.MaxInt, 4096} {
		w := migratedWriter(ctx, t, ch, limit)
		if err := w.insertAll(ctx, b); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	for _, tb := range []table{versionsTable, mutationsTable, itemsTable, scalarsTable, bodiesTable, chunksTable} {
		one, blocks := tableDigest(t, ctx, ws[0], tb), tableDigest(t, ctx, ws[1], tb)
		if one != blocks {
			t.Errorf("%s: one block %s, small blocks %s", tb.name, one, blocks)
		}
		if strings.HasPrefix(one, "0 rows") {
			t.Errorf("%s: no rows", tb.name)
		}
	}
	if want := fmt.Sprintf("%d rows", len(b.bodies.org)); !strings.HasPrefix(tableDigest(t, ctx, ws[1], bodiesTable), want) {
		t.Errorf("bodies: want %s", want)
	}
	// Every body, byte for byte.
	for i, h := range b.bodies.hash {
		var got string
		if err := ws[1].conn.QueryRow(ctx, "SELECT body FROM "+ws[1].db+".bodies WHERE hash = ?", h).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := joinParts(b.bodies.data[i]); got != want {
			t.Fatalf("body %s: %d bytes back, %d inserted", h, len(got), len(want))
		}
	}
	// The server gathers the blocks of an insert into one part.
	var parts uint64
	if err := ws[1].conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = ? AND table = 'bodies' AND active", ws[1].db).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 1 {
		t.Errorf("bodies: %d parts after one insert in blocks, want 1", parts)
	}
}

// BenchmarkInsertBodies inserts a second of the mix's bodies (40 bodies
// of 100-500 KiB and a chunk each) into the bodies and chunks tables, in
// one block per table (oneblock: the insert before blocks were bounded)
// or in blocks of maxBlockBytes. Run with -count 5 -benchmem and take
// medians; each count runs both.
func BenchmarkInsertBodies(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := newClickHouse(b)
	src := mixRows(40)
	batch := &rows{bodies: src.bodies, chunks: src.chunks}
	for _, c := range []struct {
		name  string
		limit int
	}{{"oneblock", math.MaxInt}, {"blocks", maxBlockBytes}} {
		b.Run(c.name, func(b *testing.B) {
			w := migratedWriter(ctx, b, ch, c.limit)
			n := uint64(0)
			for _, s := range batch.bodies.size {
				n += s
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := w.insertAll(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInsertBatch inserts a projector batch of every table (50
// versions, 40 bodies of 100-500 KiB) as the projector does, seven
// concurrent inserts: in one block per table with the pool keeping 5
// idle connections (the projector before), in blocks with 5, and in
// blocks with all 8 kept.
func BenchmarkInsertBatch(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := newClickHouse(b)
	batch := mixRows(40)
	defer func(n int) { idleConns = n }(idleConns)
	for _, c := range []struct {
		name        string
		limit, idle int
	}{{"oneblock-idle5", math.MaxInt, 5}, {"blocks-idle5", maxBlockBytes, 5}, {"blocks-idle8", maxBlockBytes, maxConns}} {
		b.Run(c.name, func(b *testing.B) {
			idleConns = c.idle
			w := migratedWriter(ctx, b, ch, c.limit)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := w.insertAll(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// editChain is n versions of a large body, each the one before with a
// few bytes changed at a random place, chunked as the Decider chunks
// them; the chunks are in the projector's cache.
func editChain(p *Projector, n, size int) (hashes []string, chunks [][]string) {
	rnd := rand.New(rand.NewPCG(5, 6))
	body := []byte(`"`)
	for len(body) < size {
		body = append(body, 'a'+byte(rnd.IntN(26)))
	}
	body = append(body, '"')
	for range n {
		at := 1 + rnd.IntN(len(body)-2)
		body = append(body[:at:at], append([]byte("edit"), body[at:]...)...)
		var list []string
		for _, part := range model.SplitBody(body) {
			h := hexHash(string(part))
			p.cache.chunks[chunkKey("acme", "p", h)] = part
			list = append(list, h)
		}
		hashes, chunks = append(hashes, hexHash(string(body))), append(chunks, list)
	}
	return hashes, chunks
}

func TestBlobResumesAndChecks(t *testing.T) {
	p := &Projector{cfg: Config{Log: testLogger(t)}, cache: newContentCache()}
	hashes, chunks := editChain(p, 20, 300<<10)
	for i := range hashes {
		body, ok, err := p.blob(context.Background(), "acme", "p", hashes[i], chunks[i])
		if err != nil || !ok || hexHash(joinParts(body)) != hashes[i] {
			t.Fatalf("body %d: ok %v, err %v", i, ok, err)
		}
	}
	// A chunk list that does not make the hash is refused, resumed or not.
	bad := append([]string(nil), chunks[3]...)
	bad[len(bad)-2], bad[len(bad)-1] = bad[len(bad)-1], bad[len(bad)-2]
	if _, ok, err := p.blob(context.Background(), "acme", "p", hashes[3], bad); ok || err != nil {
		t.Fatalf("swapped chunks: ok %v, err %v", ok, err)
	}
}

// BenchmarkBlob reassembles and checks the next version of an edited 300
// KB body: whole (the hash of every body from its first byte) or resumed
// after the chunks it shares with the version before.
func BenchmarkBlob(b *testing.B) {
	for _, resume := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "resume"}[resume]
		b.Run(name, func(b *testing.B) {
			p := &Projector{cfg: Config{Log: testLogger(b)}, cache: newContentCache()}
			hashes, chunks := editChain(p, 64, 300<<10)
			b.SetBytes(300 << 10)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if !resume {
					clear(p.cache.checked)
				}
				j := i % len(hashes)
				if _, ok, err := p.blob(context.Background(), "acme", "p", hashes[j], chunks[j]); !ok || err != nil {
					b.Fatalf("body %d: ok %v, err %v", j, ok, err)
				}
			}
		})
	}
}

// migratedWriter opens a writer on a new, migrated database of ch that
// inserts in blocks of at most limit bytes of strings; the connection
// closes with t.
func migratedWriter(ctx context.Context, t testing.TB, ch *testenv.ClickHouse, limit int) *writer {
	t.Helper()
	db := ch.Database(t)
	conn, err := ClickHouseConfig{Addr: []string{ch.Addr}, Database: db}.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := Migrate(ctx, conn, db); err != nil {
		t.Fatal(err)
	}
	return &writer{conn: conn, db: db, blockBytes: limit}
}

func TestKeyOrder(t *testing.T) {
	org := []string{"b", "a", "b", "a", "a"}
	ver := []uint64{1, 2, 1, 10, 2}
	seq := []uint32{0, 1, 0, 0, 0}
	order := keyOrder(len(org), []any{org, ver, seq})
	// Rows 0 and 2 have equal keys and keep their order; "a" 2 before
	// "a" 10 (numbers, not text); row 4 before row 1 by seq.
	if want := []int{4, 1, 3, 0, 2}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if got := gather(org, order).([]string); fmt.Sprint(got) != "[a a a b b]" {
		t.Fatalf("gather: %v", got)
	}
	if got := gather([]time.Time{time.Unix(0, 0), time.Unix(1, 0), time.Unix(2, 0), time.Unix(3, 0), time.Unix(4, 0)}, order).([]time.Time); got[0].Unix() != 4 || got[4].Unix() != 2 {
		t.Fatalf("gather of times: %v", got)
	}
	if order := keyOrder(3, []any{[]string{"a", "a", "b"}, []uint64{1, 1, 0}}); order != nil {
		t.Fatalf("sorted rows: order %v, want nil", order)
	}
	// Bytes, as ClickHouse compares strings: "Z" < "a", "a" < "a\x00".
	if order := keyOrder(3, []any{[]string{"a\x00", "a", "Z"}}); fmt.Sprint(order) != "[2 1 0]" {
		t.Fatalf("byte order %v", order)
	}
	// insertBlobs orders the rows of bodies and chunks by these three.
	for _, tb := range []table{bodiesTable, chunksTable} {
		if fmt.Sprint(tb.key) != "[org project hash]" {
			t.Errorf("%s: key %v, insertBlobs sorts by org, project, hash", tb.name, tb.key)
		}
	}
	for _, tb := range []table{versionsTable, mutationsTable, itemsTable, scalarsTable, bodiesTable, chunksTable, branchesTable} {
		for _, k := range tb.key {
			if !slices.Contains(tb.columns, k) {
				t.Errorf("%s: key column %s is not inserted", tb.name, k)
			}
		}
	}
}

// Every table's key columns are of types keyOrder compares: a batch of
// each table sorts without a panic, and comes out in key order.
func TestKeyOrderCoversEveryTable(t *testing.T) {
	b := mixRows(12)
	b.addBranch("o", "p", "b", []ancestor{{branch: "main", depth: 2, upto: 3}, {branch: "a", depth: 1, upto: 1}}, 7)
	for _, c := range []struct {
		table table
		cols  []any
	}{
		{versionsTable, b.versions.columns()}, {mutationsTable, b.mutations.columns()},
		{itemsTable, b.items.columns()}, {scalarsTable, b.scalars.columns()}, {branchesTable, b.branches.columns()},
	} {
		n := columnLen(c.cols[0])
		if n < 2 {
			t.Errorf("%s: %d rows in the test batch, want 2 or more", c.table.name, n)
			continue
		}
		key := c.table.keyColumns(c.cols)
		if order := keyOrder(n, key); order != nil {
			sorted := make([]any, len(key))
			for i, k := range key {
				sorted[i] = gather(k, order)
			}
			if again := keyOrder(n, sorted); again != nil {
				t.Errorf("%s: rows gathered in key order are not in key order: %v", c.table.name, again)
			}
		}
	}
}

// serverEvents reads counters of system.events.
func serverEvents(t testing.TB, ctx context.Context, w *writer, names ...string) map[string]uint64 {
	t.Helper()
	ev, err := chserver.Events(ctx, w.conn, names...)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// A batch is sent in the order of each table's key, so that the server
// writes every part as it comes instead of sorting (copying) it first;
// the tables hold the same rows either way.
func TestInsertSortedByKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch := newClickHouse(t)
	b := mixRows(12)
	if keyOrder(len(b.bodies.org), []any{b.bodies.org, b.bodies.project, b.bodies.hash}) == nil {
		t.Fatal("the test's bodies are in key order already")
	}
	const written, sorted = "MergeTreeDataWriterBlocks", "MergeTreeDataWriterBlocksAlreadySorted"
	var ws []*writer
	for _, unsorted := range []bool{true, false} {
		w := migratedWriter(ctx, t, ch, 4096)
		w.unsorted = unsorted
		e0 := serverEvents(t, ctx, w, written, sorted)
		if err := w.insertAll(ctx, b); err != nil {
			t.Fatal(err)
		}
		e1 := serverEvents(t, ctx, w, written, sorted)
		parts, already := e1[written]-e0[written], e1[sorted]-e0[sorted]
		t.Logf("unsorted %v: %d parts written, %d of them already sorted", unsorted, parts, already)
		// One part per table with rows (the batch has no branch), and one
		// of client_activity_daily: the view's GROUP BY answers its rows
		// in no order, so the server sorts that one part.
		const tables, view = 6, 1
		if parts != tables+view {
			t.Fatalf("unsorted %v: %d parts written, want %d", unsorted, parts, tables+view)
		}
		if !unsorted && already != tables {
			t.Errorf("sorted rows: the server sorted %d of the %d parts of the batch's tables", tables-already, tables)
		}
		if unsorted && already == tables {
			t.Errorf("unsorted rows: the server found all %d parts sorted", tables)
		}
		ws = append(ws, w)
	}
	for _, tb := range []table{versionsTable, mutationsTable, itemsTable, scalarsTable, bodiesTable, chunksTable, branchesTable} {
		if a, b := tableDigest(t, ctx, ws[0], tb), tableDigest(t, ctx, ws[1], tb); a != b {
			t.Errorf("%s: unsorted %s, sorted %s", tb.name, a, b)
		}
	}
}

// BenchmarkInsertSorted inserts a projector batch (50 versions, 40
// bodies of 100-500 KiB) in the batch's order and in each table's key
// order, and reports the server's CPU per insert (its threads' user and
// system time, from system.events) beside the wall time. Merges are
// stopped while it runs, so that the parts it piles up are not merged
// into its figures; run it with -count 1 several times to interleave
// the variants.
func BenchmarkInsertSorted(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := newClickHouse(b)
	batch := mixRows(40)
	for _, unsorted := range []bool{true, false} {
		b.Run(map[bool]string{true: "unsorted", false: "sorted"}[unsorted], func(b *testing.B) {
			w := migratedWriter(ctx, b, ch, maxBlockBytes)
			w.unsorted = unsorted
			if err := w.conn.Exec(ctx, "SYSTEM STOP MERGES"); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = w.conn.Exec(context.Background(), "SYSTEM START MERGES") })
			const user, sys = "UserTimeMicroseconds", "SystemTimeMicroseconds"
			b.ReportAllocs()
			e0 := serverEvents(b, ctx, w, user, sys)
			b.ResetTimer()
			for range b.N {
				if err := w.insertAll(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			e1 := serverEvents(b, ctx, w, user, sys)
			b.ReportMetric(float64(e1[user]+e1[sys]-e0[user]-e0[sys])/float64(b.N), "server-µs/op")
		})
	}
}
