package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/canon-sync/canon/internal/chserver"
)

// ClickHouseImage is the image used when a Docker engine is available: a
// current release, as in production. Local servers are whatever Debian
// ships (18.16), the oldest release Canon supports.
const ClickHouseImage = "clickhouse/clickhouse-server:25.8"

// StartClickHouse starts a ClickHouse server for this test process, in a
// container if a Docker engine answers, else as a local process. The caller
// stops it with the returned server's stop.
func StartClickHouse(ctx context.Context) (*server, error) {
	t0 := time.Now()
	var (
		s   *server
		err error
	)
	switch chooseProvider(ctx) {
	case ProviderDocker:
		s, err = startDockerClickHouse(ctx)
	default:
		s, err = startLocalClickHouse(ctx)
	}
	if err != nil {
		return nil, err
	}
	s.started = time.Since(t0)
	return s, nil
}

func startLocalClickHouse(ctx context.Context) (*server, error) {
	argv, err := clickHouseBinary(ctx)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "canon-clickhouse-")
	if err != nil {
		return nil, err
	}
	ch, err := chserver.Start(ctx, chserver.Config{Dir: work, Binary: argv, StartTimeout: startTimeout})
	if err != nil {
		if !keepServers() {
			os.RemoveAll(work)
		}
		return nil, err
	}
	return &server{
		name:     "clickhouse",
		provider: ProviderLocal,
		addrs:    []string{ch.Addr},
		tail:     ch.Tail,
		stop: func() {
			ch.Stop(10 * time.Second)
			if !keepServers() {
				os.RemoveAll(work)
			}
		},
	}, nil
}

// clickHouseBinary returns the command that runs a ClickHouse server,
// installing Debian's package first when running as root.
func clickHouseBinary(ctx context.Context) ([]string, error) {
	if argv := chserver.FindBinary(); argv != nil {
		return argv, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: install it with `%s`, or set %s to a running server's native host:port",
			chserver.ErrNotInstalled, chserver.InstallCommand, EnvClickHouseAddr)
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(cache, "clickhouse-install.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if argv := chserver.FindBinary(); argv != nil {
		return argv, nil // installed by another test process while we waited
	}
	logPath := filepath.Join(cache, "clickhouse-install.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if err := chserver.Install(ctx, logf); err != nil {
		return nil, fmt.Errorf("%w; log %s:\n%s", err, logPath, tailFile(logPath, 30))
	}
	return chserver.FindBinary(), nil
}

// clickHouseDockerConfig turns on console logging, so that the wait
// strategy sees "Ready for connections" and a failing test can print the
// server log from the container's output.
const clickHouseDockerConfig = `<clickhouse>
    <logger>
        <level>information</level>
        <console>1</console>
    </logger>
    <mark_cache_size>268435456</mark_cache_size>
</clickhouse>
`

func startDockerClickHouse(ctx context.Context) (*server, error) {
	ctr, err := testcontainers.Run(ctx, ClickHouseImage,
		testcontainers.WithEnv(map[string]string{"CLICKHOUSE_SKIP_USER_SETUP": "1"}),
		testcontainers.WithExposedPorts("9000/tcp"),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader:            strings.NewReader(clickHouseDockerConfig),
			ContainerFilePath: "/etc/clickhouse-server/config.d/testenv.xml",
			FileMode:          0o644,
		}),
		testcontainers.WithWaitStrategy(wait.ForAll(
			wait.ForListeningPort("9000/tcp"),
			wait.ForLog("Ready for connections"),
		).WithDeadline(2*time.Minute)),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("run %s: %w", ClickHouseImage, err)
	}
	s := &server{
		name:     "clickhouse",
		provider: ProviderDocker,
		tail:     func(n int) string { return containerTail(ctr, n) },
		stop:     func() { _ = testcontainers.TerminateContainer(ctr) },
	}
	addr, err := ctr.PortEndpoint(ctx, "9000/tcp", "")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.addrs = []string{addr}
	if err := pingClickHouse(ctx, addr); err != nil {
		s.stop()
		return nil, fmt.Errorf("ping ClickHouse container at %s: %w\n%s", addr, err, s.tail(40))
	}
	return s, nil
}

// clickHouseOptions are the client options of every connection testenv
// opens. ReadTimeout is cut from five minutes to one so that a statement
// 18.16 never answers fails the test quickly; see Conn.
func clickHouseOptions(addr, database string) *clickhouse.Options {
	return chserver.Options(addr, database)
}

func pingClickHouse(ctx context.Context, addr string) error { return chserver.Ping(ctx, addr) }

// Database creates a database unique to this test and drops it when the
// test ends; with CANON_TEST_KEEP=1 the database of a failed test is kept.
func (c *ClickHouse) Database(tb testing.TB) string {
	tb.Helper()
	name := strings.ToLower("t_" + sanitize(tb.Name()) + "_" + randSuffix())
	conn := c.Conn(tb, "default")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("testenv: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if tb.Failed() && keepServers() {
			tb.Logf("testenv: kept database %s on %s", name, c.Addr)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return name
}

// Conn opens a native-protocol connection to database (empty means the
// user's default database) and closes it when the test ends.
//
// What works on both 18.16 and current releases, as found against 18.16.1:
// inserts go through PrepareBatch (Exec of INSERT … VALUES never returns on
// 18.16, which waits for the data as native blocks; INSERT … SELECT is
// fine); query settings must be int or bool values and known to 18.16
// (string-valued settings are refused by the driver for servers older than
// revision 54429); bind arguments with ?, not server-side {name:Type}
// parameters; no DateTime64, Date32, Bool, Map, Int128, LowCardinality,
// Nullable sorting keys, TTL, column CODECs, async inserts or
// ReplacingMergeTree's is_deleted column.
func (c *ClickHouse) Conn(tb testing.TB, database string) driver.Conn {
	tb.Helper()
	conn, err := clickhouse.Open(clickHouseOptions(c.Addr, database))
	if err != nil {
		tb.Fatalf("testenv: open ClickHouse %s: %v", c.Addr, err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}
