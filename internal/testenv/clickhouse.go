package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
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
	ports, err := freePorts(2)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	configPath := filepath.Join(work, "config.xml")
	if err := os.WriteFile(configPath, []byte(clickHouseConfig(work, ports[0], ports[1])), 0o644); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "users.xml"), []byte(clickHouseUsers), 0o644); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	argv = append(argv, "--config-file="+configPath)
	proc := newProcess("clickhouse", work, filepath.Join(work, "clickhouse.log"), nil, argv...)
	errLog := filepath.Join(work, "clickhouse-server.err.log")
	addr := hostPort(ports[0])
	s := &server{
		name:     "clickhouse",
		provider: ProviderLocal,
		addrs:    []string{addr},
		tail: func(n int) string {
			out := proc.tail(n)
			if st, err := os.Stat(errLog); err == nil && st.Size() > 0 {
				out += "\n--- " + errLog + " ---\n" + tailFile(errLog, n)
			}
			return out
		},
		stop: func() {
			proc.stop(10 * time.Second)
			if !keepServers() {
				os.RemoveAll(work)
			}
		},
	}
	if err := proc.start(); err != nil {
		s.stop()
		return nil, err
	}
	if err := proc.waitFor(ctx, "answering a native ping", func(ctx context.Context) error {
		return pingClickHouse(ctx, addr)
	}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// clickHouseBinary returns the command that runs a ClickHouse server,
// installing Debian's package first when running as root.
func clickHouseBinary(ctx context.Context) ([]string, error) {
	if argv := findClickHouseBinary(); argv != nil {
		return argv, nil
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("clickhouse-server not found in /usr/sbin or on PATH: " +
			"install it with `sudo apt-get install -y clickhouse-server`, " +
			"or set " + EnvClickHouseAddr + " to a running server's native host:port")
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
	if argv := findClickHouseBinary(); argv != nil {
		return argv, nil // installed by another test process while we waited
	}
	logPath := filepath.Join(cache, "clickhouse-install.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	for _, args := range [][]string{
		{"apt-get", "update"},
		{"apt-get", "install", "-y", "clickhouse-server"},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout = logf
		cmd.Stderr = logf
		fmt.Fprintf(logf, "=== testenv: %s\n", strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("install clickhouse-server (%s): %w; log %s:\n%s",
				strings.Join(args, " "), err, logPath, tailFile(logPath, 30))
		}
	}
	if argv := findClickHouseBinary(); argv != nil {
		return argv, nil
	}
	return nil, fmt.Errorf("apt-get installed clickhouse-server but no server binary was found; log %s", logPath)
}

func findClickHouseBinary() []string {
	if _, err := os.Stat("/usr/sbin/clickhouse-server"); err == nil {
		return []string{"/usr/sbin/clickhouse-server"}
	}
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return []string{p}
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return []string{p, "server"}
	}
	return nil
}

// clickHouseConfig is a server config that keeps everything under work and
// listens on 127.0.0.1 only. It must load on 18.16 and on current
// releases: current ones still accept the <yandex> root element, and
// settings 18.16 does not know (max_server_memory_usage) are ignored there.
func clickHouseConfig(work string, tcpPort, httpPort int) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>%[1]s/clickhouse-server.log</log>
        <errorlog>%[1]s/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
        <console>1</console>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <http_port>%[3]d</http_port>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>%[1]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <max_concurrent_queries>100</max_concurrent_queries>
    <max_server_memory_usage>4294967296</max_server_memory_usage>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mlock_executable>false</mlock_executable>
</yandex>
`, work, tcpPort, httpPort)
}

// clickHouseUsers lets the default user in without a password, from
// loopback only.
const clickHouseUsers = `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2147483648</max_memory_usage>
            <max_threads>2</max_threads>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`

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
// opens. The defaults work against 18.16 (revision 54412: the client
// downgrades its protocol in the handshake). ReadTimeout is cut from five
// minutes to one so that a statement 18.16 never answers fails the test
// quickly; see Conn.
func clickHouseOptions(addr, database string) *clickhouse.Options {
	return &clickhouse.Options{
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
		ReadTimeout: time.Minute,
	}
}

func pingClickHouse(ctx context.Context, addr string) error {
	conn, err := clickhouse.Open(clickHouseOptions(addr, "default"))
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Ping(ctx)
}

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
