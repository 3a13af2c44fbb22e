package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

var (
	day1 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	day2 = time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC)
)

// bigBody is a deterministic text of about 100 KB: an item body of many
// chunks, of which a one-character edit changes few.
func bigBody() string {
	var b strings.Builder
	for i := 0; b.Len() < 100_000; i++ {
		fmt.Fprintf(&b, "line %d of the roadmap document, with some words to chunk. ", i*7919%100_003)
	}
	return b.String()
}

// scenario is the history the analytics examples of docs/analytics.md
// are written against: two projects, three clients, two days, a branch.
func scenario(t testing.TB) []mut {
	delay := map[string]time.Duration{"alice": 200 * time.Millisecond, "bob": time.Second, "carol": 3 * time.Second}
	ids := map[string]uint64{}
	m := func(project, branch, client, name string, args any, at time.Time) mut {
		key := project + "/" + branch + "/" + client
		ids[key]++
		return mut{at: at, Mutation: schemas.Mutation{
			Org: "acme", Project: project, Branch: branch, ClientGroup: "g-" + client, Client: client,
			ID: ids[key], Name: name, Args: mustJSON(t, args),
			TS: at.Add(-delay[client]).UnixMilli(), Principal: "user:" + client, ReceivedAt: at.Add(-10 * time.Millisecond).UnixMilli(),
		}}
	}
	min := func(d time.Time, n int) time.Time { return d.Add(time.Duration(n) * time.Minute) }
	type obj = map[string]any
	return []mut{
		m("roadmap", "main", "alice", "project.set", obj{"name": "Roadmap"}, min(day1, 0)),
		m("roadmap", "main", "alice", "item.put", obj{"collection": "tasks", "id": "t1", "meta": obj{"owner": "alice"}, "data": obj{"title": "Ship", "done": false}}, min(day1, 1)),
		m("roadmap", "main", "bob", "item.patch", obj{"collection": "tasks", "id": "t1", "data": obj{"done": true}}, min(day1, 2)),
		m("roadmap", "main", "bob", "item.patch", obj{"collection": "tasks", "id": "t2", "data": obj{"done": true}}, min(day1, 3)),
		m("roadmap", "main", "alice", "item.put", obj{"collection": "docs", "id": "d1", "data": obj{"body": bigBody()}}, min(day1, 4)),
		m("roadmap", "main", "bob", "item.splice", obj{"collection": "docs", "id": "d1", "path": "/body", "index": 10, "insert": "X"}, min(day1, 5)),
		m("roadmap", "main", "alice", "project.set", obj{"description": "Q3 plan"}, min(day2, 0)),
		m("roadmap", "main", "bob", "item.delete", obj{"collection": "tasks", "id": "t1"}, min(day2, 1)),
		m("roadmap", "main", "alice", "project.set", obj{"name": nil}, min(day2, 2)),
		m("roadmap", "main", "alice", "item.put", obj{"collection": "tasks", "id": "t3", "data": obj{"title": "Plan"}}, min(day2, 3)),
		m("roadmap", "exp", "carol", "branch.create", obj{"from": "main", "version": 6}, min(day2, 60)),
		m("roadmap", "exp", "carol", "project.set", obj{"name": "Experiment"}, min(day2, 61)),
		m("roadmap", "exp", "carol", "item.put", obj{"collection": "tasks", "id": "t4", "data": obj{"title": "Try", "done": true}}, min(day2, 62)),
		m("roadmap", "exp", "carol", "item.delete", obj{"collection": "tasks", "id": "t1"}, min(day2, 63)),
		// What `canon rebase` sends: main's versions 2 and 3 onto main@1 as
		// branch rb, run by dana a day later; the re-sent mutations keep
		// their original times, and say where they come from.
		rebased(m("roadmap", "rb", "canon-rebase", "branch.create", obj{"from": "main", "version": 1}, min(day2, 120)), nil),
		rebased(m("roadmap", "rb", "alice", "item.put", obj{"collection": "tasks", "id": "t1", "meta": obj{"owner": "alice"}, "data": obj{"title": "Ship", "done": false}}, min(day1, 1)),
			&schemas.Origin{Branch: "main", Version: 2, Client: "alice", ID: 2}),
		rebased(m("roadmap", "rb", "bob", "item.patch", obj{"collection": "tasks", "id": "t1", "data": obj{"done": true}}, min(day1, 2)),
			&schemas.Origin{Branch: "main", Version: 3, Client: "bob", ID: 1}),
		m("wiki", "main", "bob", "item.put", obj{"collection": "pages", "id": "p1", "data": obj{"text": "hello"}}, day1.Add(3*time.Hour)),
		m("wiki", "main", "bob", "item.patch", obj{"collection": "pages", "id": "p1", "data": obj{"text": "hello world"}}, day1.Add(3*time.Hour+time.Minute)),
		m("wiki", "main", "bob", "foo.bar", obj{}, day1.Add(3*time.Hour+2*time.Minute)),
	}
}

// rebasedJob is the run of `canon rebase` in the scenario.
var rebasedJob = schemas.Job{Kind: "rebase", Principal: "user:dana", At: day2.Add(2 * time.Hour).UnixMilli()}

// rebased makes a scenario mutation one that the rebase job sent, as the
// pipeline does: no principal or receipt of its own, the job, and the
// mutation it re-sends.
func rebased(m mut, origin *schemas.Origin) mut {
	j := rebasedJob
	m.Principal, m.ReceivedAt, m.Job, m.Origin = "", 0, &j, origin
	if m.Client == "canon-rebase" {
		m.ClientGroup, m.TS = "canon-pipeline", 0
	}
	return m
}

// docQueries reads the example queries of docs/analytics.md: each SQL
// block after a <!-- query: name --> marker.
func docQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/analytics.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- query: ([a-z_]+) -->\\s*```sql\\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if _, dup := out[m[1]]; dup {
			t.Fatalf("docs/analytics.md: two queries named %s", m[1])
		}
		out[m[1]] = m[2]
	}
	return out
}

// storage is what the storage query must answer, computed from the
// changelog on its own: per project, the puts, their body sizes, and the
// bytes of the chunks each put was the first to use (bodies before args,
// in changelog order).
func storage(c changelogContent, sizes map[string]int64) map[string][3]int64 {
	seen := map[string]bool{}
	out := map[string][3]int64{}
	for _, v := range c.versions {
		p := v.Org + "/" + v.Project
		s := out[p]
		for _, it := range v.Items {
			if it.Op != schemas.OpPut {
				continue
			}
			s[0]++
			s[1] += it.Size
			for _, h := range it.Chunks {
				if !seen[p+h] {
					seen[p+h] = true
					s[2] += sizes[p+h]
				}
			}
		}
		for _, o := range v.Mutations {
			if o.ArgsRef != nil {
				for _, h := range o.ArgsRef.Chunks {
					seen[p+h] = true
				}
			}
		}
		out[p] = s
	}
	return out
}

// The example queries of docs/analytics.md, run against the tables the
// projector filled from genuine version records, give the asserted
// answers; then a backfill inserts every row a second time and the
// answers stay the same (the FINAL form and the view deduplicate).
func TestAnalyticsQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 3)
	ms := scenario(t)
	f.produce(t, ctx, ms)
	st := f.runSequencer(t, ctx)
	content := f.readVersions(t, ctx, len(ms))

	runProjector(t, ctx, f.projectorConfig(t))
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".versions FINAL", uint64(len(ms)))
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".mutations FINAL", uint64(len(ms)))
	// An insert makes the table's rows visible before those its
	// materialized view derives from them: wait for the view as well.
	waitCount(t, ctx, f, "SELECT sum(m) FROM (SELECT uniqExactMerge(mutations) AS m FROM "+f.db+
		".client_activity_daily GROUP BY day, org, project, client_group, client)", uint64(len(ms)))

	var d1Hash string
	for _, v := range content.versions {
		if v.Project == "roadmap" && v.Branch == "main" && v.Version == 6 {
			d1Hash = v.Items[0].Hash
		}
	}
	var t1Hash string
	for _, v := range content.versions {
		if v.Project == "roadmap" && v.Branch == "main" && v.Version == 3 {
			t1Hash = v.Items[0].Hash
		}
	}
	var t4Hash string
	for _, v := range content.versions {
		if v.Project == "roadmap" && v.Branch == "exp" && v.Version == 3 {
			t4Hash = v.Items[0].Hash
		}
	}
	argsLen := func(i int) string { return fmt.Sprint(len(ms[i].Args)) }
	stored := storage(content, content.sizes)
	storageRow := func(project string) []string {
		s := stored["acme/"+project]
		return []string{"acme", project, fmt.Sprint(s[0]), fmt.Sprint(s[1]), fmt.Sprint(s[2]), fmt.Sprint(s[1] - s[2])}
	}
	want := map[string][][]string{
		"item_history": {
			{"2", "put", `{"owner":"alice"}`, "2026-03-02 09:01:00"},
			{"3", "put", `{"owner":"alice"}`, "2026-03-02 09:02:00"},
			{"8", "delete", "", "2026-03-03 10:01:00"},
		},
		"items_as_of_version": {
			{"docs", "d1", "put", "6", d1Hash},
			{"tasks", "t1", "put", "3", t1Hash},
		},
		"items_as_of_time": {
			{"docs", "d1", "put", "6"},
			{"tasks", "t3", "put", "10"},
		},
		"who_edited_what": {
			{"alice", "docs", "d1", "1"},
			{"alice", "tasks", "t1", "2"},
			{"alice", "tasks", "t3", "1"},
			{"bob", "docs", "d1", "1"},
			{"bob", "pages", "p1", "2"},
			{"bob", "tasks", "t1", "3"},
			{"carol", "tasks", "t1", "1"},
			{"carol", "tasks", "t4", "1"},
		},
		"error_rate_by_mutator": {
			{"branch.create", "2", "0", "0"},
			{"foo.bar", "1", "1", "1"},
			{"item.delete", "2", "0", "0"},
			{"item.patch", "4", "1", "0.25"},
			{"item.put", "6", "0", "0"},
			{"item.splice", "1", "0", "0"},
			{"project.set", "4", "0", "0"},
		},
		"busiest_projects": {
			{"acme", "roadmap", "17", "17", "4"},
			{"acme", "wiki", "3", "3", "1"},
		},
		"items_as_of_branch_version": {
			{"docs", "d1", "put", "main", "6", d1Hash},
			{"tasks", "t4", "put", "exp", "3", t4Hash},
		},
		"tasks_done": {{"1", "1"}},
		"item_lineage": {
			{"2", "put", "alice", "user:alice", "item.put", "2"},
			{"3", "put", "bob", "user:bob", "item.patch", "1"},
			{"8", "delete", "bob", "user:bob", "item.delete", "4"},
		},
		"mutations_of_an_item": {
			{"5", "alice", "item.put", argsLen(4), argsLen(4)},
			{"6", "bob", "item.splice", argsLen(5), argsLen(5)},
		},
		"rebased_mutations": {
			{"rb", "2", "main", "2", "alice", "2", "user:alice", "rebase", "user:dana", "applied", "applied"},
			{"rb", "3", "main", "3", "bob", "1", "user:bob", "rebase", "user:dana", "applied", "applied"},
		},
		"error_rate_by_code": {
			{"foo.bar", "unknown_mutator", "1", "1"},
			{"item.patch", "not_found", "1", "1"},
		},
		"storage_saved_by_chunking": {storageRow("roadmap"), storageRow("wiki")},
		"client_to_applied": {
			{"alice", "7", "200", "200"},
			{"bob", "8", "1000", "1000"},
			{"carol", "4", "3000", "3000"},
		},
		"versions_per_day": {
			{"2026-03-02", "11", "2"},
			{"2026-03-03", "9", "1"},
		},
		"client_activity_daily": {
			{"2026-03-02", "roadmap", "alice", "4", "4", "0", "4"},
			{"2026-03-02", "roadmap", "bob", "4", "3", "1", "4"},
			{"2026-03-02", "wiki", "bob", "3", "2", "1", "3"},
			{"2026-03-03", "roadmap", "alice", "3", "3", "0", "3"},
			{"2026-03-03", "roadmap", "bob", "1", "1", "0", "1"},
			{"2026-03-03", "roadmap", "canon-rebase", "1", "1", "0", "1"},
			{"2026-03-03", "roadmap", "carol", "4", "4", "0", "4"},
		},
		"scalar_history": {
			{"exp", "2", "name", "set", `"Experiment"`, `"Roadmap"`},
			{"main", "1", "name", "set", `"Roadmap"`, ""},
			{"main", "7", "description", "set", `"Q3 plan"`, ""},
			{"main", "9", "name", "delete", "", `"Roadmap"`},
		},
	}
	// The storage example must show chunking at work: the splice of the
	// 100 KB body stored a few KB, not 100 KB again.
	if s := stored["acme/roadmap"]; s[1]-s[2] < 90_000 {
		t.Fatalf("roadmap puts wrote %d bytes and stored %d: chunking saved too little for the example", s[1], s[2])
	}

	// Times of the sequencer vary from run to run: these answers are
	// checked by their number of rows, and equal on both ClickHouses.
	wantRows := map[string]int{"time_inside_canon": 3}

	queries := docQueries(t)
	if len(queries) < 8 {
		t.Fatalf("docs/analytics.md has %d example queries, want at least 8", len(queries))
	}
	// The same rows on a current ClickHouse, through the same migrations:
	// every query must answer the same there.
	cur := testenv.NewCurrentClickHouse(t)
	if _, err := MigrateSession(ctx, cur, f.db); err != nil {
		t.Fatalf("migrate ClickHouse %s: %v", cur.Version, err)
	}
	copyRows(t, ctx, f, cur)
	readme := readmeQueries(t, f.db)
	check := func(round string) {
		t.Helper()
		for name, q := range queries {
			w, ok := want[name]
			got := queryStrings(t, ctx, f, sqlFor(f.db, q))
			if n, counted := wantRows[name]; counted {
				if len(got) != n {
					t.Errorf("%s: query %s answered %d rows, want %d: %v", round, name, len(got), n, got)
				}
				w, ok = got, true
			}
			if !ok {
				t.Errorf("query %s of docs/analytics.md has no expected answer in this test", name)
				continue
			}
			if !slices.EqualFunc(got, w, slices.Equal) {
				t.Errorf("%s: query %s answered\n%v\nwant\n%v", round, name, got, w)
			}
			gotCur, err := cur.Query(ctx, sqlFor(f.db, q))
			if err != nil {
				t.Errorf("%s: query %s on ClickHouse %s: %v", round, name, cur.Version, err)
			} else if !slices.EqualFunc(gotCur, w, slices.Equal) {
				t.Errorf("%s: query %s answered on ClickHouse %s\n%v\nwant\n%v", round, name, cur.Version, gotCur, w)
			}
		}
		for i, q := range readme {
			old := queryStrings(t, ctx, f, q)
			got, err := cur.Query(ctx, q)
			switch {
			case err != nil:
				t.Errorf("%s: README query %d on ClickHouse %s: %v", round, i+1, cur.Version, err)
			case len(old) == 0:
				t.Errorf("%s: README query %d answered nothing: %s", round, i+1, q)
			case !slices.EqualFunc(got, old, slices.Equal):
				t.Errorf("%s: README query %d answered on 18.16\n%v\nand on %s\n%v", round, i+1, old, cur.Version, got)
			}
		}
		for name := range wantRows {
			want[name] = nil
		}
		for name := range want {
			if _, ok := queries[name]; !ok {
				t.Errorf("expected answer for %s, but docs/analytics.md has no such query", name)
			}
		}
	}
	check("after the projector")
	checkAsOfBranches(t, ctx, f, cur, st, queries["items_as_of_branch_version"])
	checkContent(t, ctx, f, st)

	// A backfill with its own group inserts every row again.
	before := rowCount(t, ctx, f, "mutations")
	cfg := f.projectorConfig(t)
	cfg.Group = f.prefix + "backfill"
	var reports int
	pr, err := Backfill(ctx, cfg, 50*time.Millisecond, func(Progress) { reports++ })
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	if pr.Done != pr.Total || pr.Total == 0 || pr.Rows == 0 {
		t.Fatalf("backfill ended at %+v", pr)
	}
	if err := DeleteGroup(ctx, cfg.Kafka, cfg.Group); err != nil {
		t.Fatalf("delete the backfill's group: %v", err)
	}
	if after := rowCount(t, ctx, f, "mutations"); after < before+uint64(len(ms)) && !mergedAway(t, ctx, f) {
		t.Fatalf("mutations holds %d rows before the backfill and %d after: the backfill inserted nothing", before, after)
	}
	copyRows(t, ctx, f, cur)
	check("after a backfill inserted every row again")
}

// readmeQueries reads the SQL of the README's analysts section, made to
// ask about the scenario's project and the test's database.
func readmeQueries(t *testing.T, db string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### Query the history.*?```sql\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no SQL block under \"Query the history\"")
	}
	var out []string
	for q := range strings.SplitSeq(string(m[1]), ";") {
		if strings.TrimSpace(q) == "" {
			continue
		}
		out = append(out, strings.NewReplacer("canon.", db+".", "FROM canon\n", "FROM "+db+"\n", "'dev'", "'acme'", "'demo'", "'roadmap'",
			"'notes'", "'tasks'", "'n1'", "'t1'").Replace(q+"\n"))
	}
	return out
}

// rowCount counts a table's rows without FINAL: duplicates included
// until merged.
func rowCount(t testing.TB, ctx context.Context, f *fixture, table string) uint64 {
	t.Helper()
	var n uint64
	if err := f.ch.Conn(t, f.db).QueryRow(ctx, "SELECT count() FROM "+f.db+"."+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mergedAway reports whether ClickHouse already merged the parts of the
// mutations table into one (then duplicates are gone without FINAL).
func mergedAway(t testing.TB, ctx context.Context, f *fixture) bool {
	t.Helper()
	var parts uint64
	if err := f.ch.Conn(t, f.db).QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = ? AND table = 'mutations' AND active",
		f.db).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	return parts <= 1
}

// copyRows sends every row of the history tables (duplicates included)
// from the 18.16 server to the current ClickHouse, as JSONEachRow. The
// views there derive their rows from these inserts.
func copyRows(t *testing.T, ctx context.Context, f *fixture, cur *testenv.CurrentClickHouse) {
	t.Helper()
	conn := f.ch.Conn(t, f.db)
	for _, tb := range []string{versionsTable.name, mutationsTable.name, itemsTable.name, scalarsTable.name,
		bodiesTable.name, chunksTable.name, branchesTable.name} {
		rs, err := conn.Query(ctx, "SELECT * FROM "+f.db+"."+tb)
		if err != nil {
			t.Fatal(err)
		}
		cts := rs.ColumnTypes()
		var buf bytes.Buffer
		for rs.Next() {
			vals := make([]any, len(cts))
			for i, ct := range cts {
				vals[i] = newScanValue(ct.ScanType())
			}
			if err := rs.Scan(vals...); err != nil {
				t.Fatal(err)
			}
			row := map[string]any{}
			for i, v := range vals {
				v = reflect.ValueOf(v).Elem().Interface()
				if ts, ok := v.(time.Time); ok {
					v = ts.UTC().Format("2006-01-02 15:04:05.000")
				}
				row[cts[i].Name()] = v
			}
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		rs.Close()
		if err := cur.Insert(ctx, f.db+"."+tb, buf.Bytes()); err != nil {
			t.Fatalf("copy %s to ClickHouse %s: %v", tb, cur.Version, err)
		}
	}
}

// checkAsOfBranches runs the documented as-of query for every version of
// every branch of acme/roadmap, on both ClickHouses, and compares its
// items and body hashes with the store's state at that version: what the
// read API serves.
func checkAsOfBranches(t *testing.T, ctx context.Context, f *fixture, cur *testenv.CurrentClickHouse, st *store.Store, query string) {
	t.Helper()
	heads := queryStrings(t, ctx, f, "SELECT branch, max(version) FROM "+f.db+".versions FINAL WHERE org = 'acme' AND project = 'roadmap' GROUP BY branch ORDER BY branch")
	if len(heads) != 3 {
		t.Fatalf("branches of acme/roadmap: %v, want main, exp and rb", heads)
	}
	for _, h := range heads {
		branch := h[0]
		var head uint64
		fmt.Sscan(h[1], &head)
		for v := uint64(1); v <= head; v++ {
			q := strings.NewReplacer("branch = 'exp'", "branch = '"+branch+"'", "if(depth = 0, 4, upto)", fmt.Sprintf("if(depth = 0, %d, upto)", v)).
				Replace(sqlFor(f.db, query))
			var got [][]string
			for _, r := range queryStrings(t, ctx, f, q) {
				got = append(got, []string{r[0], r[1], r[5]})
			}
			state, err := st.StateAt("acme", "roadmap", branch, v, false)
			if err != nil {
				t.Fatal(err)
			}
			var want [][]string
			for _, refs := range state.Collections {
				for _, r := range refs {
					want = append(want, []string{r.Collection, r.ID, r.Hash})
				}
			}
			slices.SortFunc(want, func(a, b []string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("%s@%d: the as-of query answered %v, the read API's state has %v", branch, v, got, want)
			}
			gotCur, err := cur.Query(ctx, q)
			if err != nil {
				t.Fatalf("%s@%d on ClickHouse %s: %v", branch, v, cur.Version, err)
			}
			if old := queryStrings(t, ctx, f, q); !slices.EqualFunc(gotCur, old, slices.Equal) {
				t.Errorf("%s@%d: ClickHouse %s answered %v, 18.16 %v", branch, v, cur.Version, gotCur, old)
			}
		}
	}
}

// checkContent checks what the history adds for analysts: every body
// is there whole, equal to the store's; the sequencer's times are set and
// in order.
func checkContent(t *testing.T, ctx context.Context, f *fixture, st *store.Store) {
	t.Helper()
	if got := queryStrings(t, ctx, f, "SELECT count() FROM "+f.db+".item_changes FINAL WHERE op = 'put' AND hash NOT IN (SELECT hash FROM "+
		f.db+".bodies)"); got[0][0] != "0" {
		t.Errorf("%s puts have no body in the bodies table", got[0][0])
	}
	if got := queryStrings(t, ctx, f, "SELECT count() FROM "+f.db+".bodies FINAL"); got[0][0] != fmt.Sprint(len(queryStrings(t, ctx, f,
		"SELECT DISTINCT org, project, hash FROM "+f.db+".item_changes FINAL WHERE op = 'put'"))) {
		t.Errorf("bodies holds %s rows, not one per distinct body", got[0][0])
	}
	state, err := st.StateAt("acme", "roadmap", "main", 6, true)
	if err != nil {
		t.Fatal(err)
	}
	for hash, body := range state.Bodies {
		got := queryStrings(t, ctx, f, "SELECT body FROM "+f.db+".bodies FINAL WHERE org = 'acme' AND project = 'roadmap' AND hash = '"+hash+"'")
		if len(got) != 1 || got[0][0] != string(body) {
			t.Errorf("body %s in ClickHouse differs from the store's (%d bytes)", hash, len(body))
		}
	}
	for _, tb := range []string{"versions", "mutations"} {
		bad := queryStrings(t, ctx, f, "SELECT count() FROM "+f.db+"."+tb+" FINAL WHERE decided_ms = 0 OR committed_ms < decided_ms")
		if bad[0][0] != "0" {
			t.Errorf("%s rows of %s have no decided time or were committed before they were decided", bad[0][0], tb)
		}
	}
	if bad := queryStrings(t, ctx, f, "SELECT count() FROM "+f.db+".mutations FINAL WHERE received_ms > 0 AND "+
		"(decided_ms < received_ms OR applied_ms = decided_ms)"); bad[0][0] != "0" {
		t.Errorf("%s mutations were decided before they were received", bad[0][0])
	}
}
