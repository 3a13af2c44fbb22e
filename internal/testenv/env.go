// Package testenv gives Canon's integration tests a real Apache Kafka broker
// (4.x, KRaft, single node) and a real ClickHouse server.
//
// Each dependency is found or started once per test process, in this order:
//
//  1. addresses from the environment: CANON_TEST_KAFKA_BROKERS (comma
//     separated host:port list) and CANON_TEST_CLICKHOUSE_ADDR (host:port of
//     the native protocol). `make test` starts both once for the whole run
//     with internal/testenv/run and passes them down this way;
//  2. otherwise, if a Docker engine answers, containers through
//     testcontainers-go (apache/kafka and clickhouse/clickhouse-server);
//  3. otherwise local processes: Kafka from the Maven Central jars, fetched
//     once into the user cache dir, and Debian's clickhouse-server, each with
//     its own data directory and free 127.0.0.1 ports.
//
// CANON_TEST_PROVIDER=local or =docker forces the second or third way.
//
// Tests are isolated by unique names (Kafka.Topic, ClickHouse.Database), not
// by servers. Under CI=true a dependency that cannot be had fails the test;
// outside CI it fails too, unless the test runs with -short, which skips
// integration tests.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables read by testenv.
const (
	EnvKafkaBrokers   = "CANON_TEST_KAFKA_BROKERS"
	EnvClickHouseAddr = "CANON_TEST_CLICKHOUSE_ADDR"
	EnvProvider       = "CANON_TEST_PROVIDER"
	EnvCacheDir       = "CANON_TEST_CACHE"
	EnvKeep           = "CANON_TEST_KEEP"
)

// Provider names, as reported by Kafka.Provider and ClickHouse.Provider.
const (
	ProviderEnv    = "env"
	ProviderDocker = "docker"
	ProviderLocal  = "local"
)

// startTimeout bounds how long starting one dependency may take, including
// the first download of Kafka's jars.
const startTimeout = 5 * time.Minute

// server is one running dependency started by this package.
type server struct {
	name     string
	provider string
	addrs    []string
	started  time.Duration // how long the start took
	stop     func()
	tail     func(n int) string // last n lines of the server log
}

var (
	mu      sync.Mutex
	started []*server // stopped by Main, in reverse order

	kafkaOnce sync.Once
	kafkaSrv  *server
	kafkaErr  error

	chOnce sync.Once
	chSrv  *server
	chErr  error
)

// Main runs the tests of a package and then stops every server that
// testenv started for them, and removes the canon binary BuildCanon
// built. Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	StopAll()
	removeCanonBinary()
	os.Exit(code)
}

// StopAll stops every server started by this process, newest first.
func StopAll() {
	mu.Lock()
	srvs := started
	started = nil
	mu.Unlock()
	for i := len(srvs) - 1; i >= 0; i-- {
		srvs[i].stop()
	}
}

func register(s *server) {
	mu.Lock()
	started = append(started, s)
	mu.Unlock()
}

// keepServers is true when CANON_TEST_KEEP=1 asks to keep the servers'
// work dirs and logs, and the databases of failed tests, for inspection.
func keepServers() bool { return os.Getenv(EnvKeep) == "1" }

// InCI reports whether the tests run under CI (CI=true), where a missing
// dependency is a failure and never a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// requireIntegration skips the test under -short outside CI.
func requireIntegration(tb testing.TB) {
	tb.Helper()
	if testing.Short() && !InCI() {
		tb.Skip("integration test skipped with -short")
	}
}

// dumpOnFailure prints the tail of a server log when the test has failed.
func dumpOnFailure(tb testing.TB, s *server) {
	if s.tail == nil {
		return
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("last lines of the %s log (%s):\n%s", s.name, s.provider, s.tail(60))
		}
	})
}

// Kafka is a Kafka broker reachable by a test.
type Kafka struct {
	// Brokers are the seed addresses.
	Brokers []string
	// Provider tells where the broker comes from: env, docker or local.
	Provider string
}

// NewKafka returns the shared broker of this test process, starting it on
// first use. It fails the test if no broker can be had.
func NewKafka(tb testing.TB) *Kafka {
	tb.Helper()
	requireIntegration(tb)
	kafkaOnce.Do(func() {
		kafkaSrv, kafkaErr = findKafka()
	})
	if kafkaErr != nil {
		tb.Fatalf("testenv: no Kafka broker: %v", kafkaErr)
	}
	dumpOnFailure(tb, kafkaSrv)
	return &Kafka{Brokers: kafkaSrv.addrs, Provider: kafkaSrv.provider}
}

func findKafka() (*server, error) {
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		return &server{name: "kafka", provider: ProviderEnv, addrs: strings.Split(v, ","), stop: func() {}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := StartKafka(ctx, KafkaOptions{})
	if err != nil {
		return nil, err
	}
	register(s.srv)
	return s.srv, nil
}

// Topic returns a topic name unique to this test run and test.
func (k *Kafka) Topic(tb testing.TB, name string) string {
	tb.Helper()
	return fmt.Sprintf("%s.%s.%s", sanitize(tb.Name()), name, randSuffix())
}

// ClickHouse is a ClickHouse server reachable by a test over the native
// protocol.
type ClickHouse struct {
	// Addr is host:port of the native protocol.
	Addr string
	// Provider tells where the server comes from: env, docker or local.
	Provider string
}

// NewClickHouse returns the shared ClickHouse server of this test process,
// starting it on first use. It fails the test if no server can be had.
func NewClickHouse(tb testing.TB) *ClickHouse {
	tb.Helper()
	requireIntegration(tb)
	chOnce.Do(func() {
		chSrv, chErr = findClickHouse()
	})
	if chErr != nil {
		tb.Fatalf("testenv: no ClickHouse server: %v", chErr)
	}
	dumpOnFailure(tb, chSrv)
	return &ClickHouse{Addr: chSrv.addrs[0], Provider: chSrv.provider}
}

func findClickHouse() (*server, error) {
	if v := os.Getenv(EnvClickHouseAddr); v != "" {
		return &server{name: "clickhouse", provider: ProviderEnv, addrs: []string{v}, stop: func() {}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := StartClickHouse(ctx)
	if err != nil {
		return nil, err
	}
	register(s)
	return s, nil
}

// chooseProvider returns docker or local for a dependency that was not
// given through the environment.
func chooseProvider(ctx context.Context) string {
	switch os.Getenv(EnvProvider) {
	case ProviderDocker:
		return ProviderDocker
	case ProviderLocal:
		return ProviderLocal
	}
	if dockerAvailable(ctx) {
		return ProviderDocker
	}
	return ProviderLocal
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 80 {
		out = out[:80]
	}
	return out
}

func randSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
