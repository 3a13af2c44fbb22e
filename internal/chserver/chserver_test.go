package chserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/canon-sync/canon/internal/chserver"
	"github.com/canon-sync/canon/internal/testenv"
)

// TestRestartKeepsData starts a server, writes a row, stops it, starts it
// again on the same directory and reads the row back: what `canon dev`
// relies on to keep the history across restarts.
func TestRestartKeepsData(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("starts a ClickHouse server")
	}
	if chserver.FindBinary() == nil && !testenv.InCI() {
		t.Skipf("clickhouse-server is not installed (%s)", chserver.InstallCommand)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()

	s, err := chserver.Start(ctx, chserver.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := open(t, s.Addr)
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS kept",
		"CREATE TABLE kept.t (a String) ENGINE = MergeTree ORDER BY a",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO kept.t (a)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("survives"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	s.Stop(30 * time.Second)
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned with the server still running")
	}
	if err := chserver.Ping(ctx, s.Addr); err == nil {
		t.Fatalf("a stopped server still answers at %s", s.Addr)
	}

	s2, err := chserver.Start(ctx, chserver.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop(30 * time.Second)
	var got string
	if err := open(t, s2.Addr).QueryRow(ctx, "SELECT a FROM kept.t").Scan(&got); err != nil {
		t.Fatalf("read after restart: %v\n%s", err, s2.Tail(40))
	}
	if got != "survives" {
		t.Fatalf("read %q after restart, want survives", got)
	}
}

func TestStartWithoutBinary(t *testing.T) {
	_, err := chserver.Start(context.Background(), chserver.Config{Dir: t.TempDir(), Binary: []string{"/nonexistent/clickhouse-server"}})
	if err == nil {
		t.Fatal("started a server from a binary that does not exist")
	}
	if errors.Is(err, chserver.ErrNotInstalled) {
		t.Fatalf("an explicit binary is not a missing install: %v", err)
	}
}

func open(t *testing.T, addr string) clickhouse.Conn {
	t.Helper()
	conn, err := clickhouse.Open(chserver.Options(addr, "default"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
