package testenv

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"
)

// TestClickHouse checks that the server answers over the native protocol
// and that the SQL Canon relies on (ReplacingMergeTree, batch inserts with
// a column list, FINAL) behaves the same on 18.16 and current releases.
func TestClickHouse(t *testing.T) {
	ch := NewClickHouse(t)
	db := ch.Database(t)
	conn := ch.Conn(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatalf("select version(): %v", err)
	}
	if !regexp.MustCompile(`^\d+\.\d+`).MatchString(version) {
		t.Fatalf("version() = %q, want a release number", version)
	}
	t.Logf("ClickHouse %s at %s (%s, started in %s)", version, ch.Addr, ch.Provider, chSrv.started.Round(time.Millisecond))

	if err := conn.Exec(ctx, "CREATE TABLE "+db+".t (a String, b Int64, version UInt64) "+
		"ENGINE = ReplacingMergeTree(version) ORDER BY a"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	type row struct {
		A       string
		B       int64
		Version uint64
	}
	insert := func(rows ...row) {
		t.Helper()
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".t (a, b, version)")
		if err != nil {
			t.Fatalf("prepare batch: %v", err)
		}
		for _, r := range rows {
			if err := batch.Append(r.A, r.B, r.Version); err != nil {
				t.Fatalf("append %v: %v", r, err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatalf("send batch: %v", err)
		}
	}
	insert(row{"k1", 1, 1}, row{"k2", 2, 1}, row{"k3", 3, 1})
	// Two parts now hold k1 and k3 twice; k2's newer insert has an older
	// version and must lose.
	insert(row{"k1", 10, 2}, row{"k3", 30, 7}, row{"k2", 20, 0})

	rows, err := conn.Query(ctx, "SELECT a, b, version FROM "+db+".t FINAL ORDER BY a")
	if err != nil {
		t.Fatalf("select final: %v", err)
	}
	defer rows.Close()
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.A, &r.B, &r.Version); err != nil {
			t.Fatalf("scan: %v", err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	want := []row{{"k1", 10, 2}, {"k2", 2, 1}, {"k3", 30, 7}}
	if !slices.Equal(got, want) {
		t.Fatalf("SELECT ... FINAL = %v, want %v", got, want)
	}
}
