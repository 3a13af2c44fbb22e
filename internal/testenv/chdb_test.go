package testenv

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestCurrentClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := NewCurrentClickHouse(t)
	if c.Version < "2" { // 18.16 sorts before every 2x release
		t.Fatalf("chdb embeds ClickHouse %q, want a current release", c.Version)
	}
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS d",
		"CREATE TABLE IF NOT EXISTS d.t (s String, n UInt64, ts DateTime('UTC')) ENGINE = MergeTree ORDER BY s",
	} {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Insert(ctx, "d.t", []byte(`{"s":"a\"b","n":18446744073709551615,"ts":"2026-03-02 09:01:00"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Query(ctx, "SELECT s, n, ts, toDate(ts), round(1 / 3, 2), [1, 2] FROM d.t")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{`a"b`, "18446744073709551615", "2026-03-02 09:01:00", "2026-03-02", "0.33", "[1,2]"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := c.Query(ctx, "SELECT nosuchcolumn FROM d.t"); err == nil {
		t.Fatal("a bad query gave no error")
	}
	if got, err := c.Query(ctx, "SELECT count() FROM d.t"); err != nil || got[0][0] != "1" {
		t.Fatalf("after an error the runner answers %q, %v", got, err)
	}
}
