// Command canon-bench is Canon's end-to-end benchmark: it runs `canon
// serve` against a real Kafka and ClickHouse under a load of Go clients
// (package internal/loadgen), then the same records through Kafka alone,
// and writes a markdown report and a plot of latency over time.
//
//	go run ./internal/testenv/run -- go run ./cmd/canon-bench --canon bin/canon
//
// `make bench` does that with defaults sized for a small machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/canon-sync/canon/internal/loadgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "canon-bench: %v\n", err)
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func run() error {
	var (
		cfg                loadgen.Config
		brokers, mix, out  string
		largeMin, largeMax int
	)
	fs := flag.NewFlagSet("canon-bench", flag.ContinueOnError)
	fs.StringVar(&brokers, "brokers", os.Getenv("CANON_TEST_KAFKA_BROKERS"), "Kafka brokers, host:port, comma separated (default $CANON_TEST_KAFKA_BROKERS)")
	fs.StringVar(&cfg.ClickHouse, "clickhouse", os.Getenv("CANON_TEST_CLICKHOUSE_ADDR"), "ClickHouse native host:port, user default without password (default $CANON_TEST_CLICKHOUSE_ADDR)")
	fs.StringVar(&cfg.Canon, "canon", "bin/canon", "the canon binary to run (make build)")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	fs.IntVar(&cfg.Projects, "projects", 4, "projects the clients write (client i writes project i mod N)")
	fs.DurationVar(&cfg.Duration, "duration", 45*time.Second, "how long the clients push")
	fs.IntVar(&cfg.Mutations, "mutations", 0, "mutations per client; when set, the run ends after them instead of after --duration")
	fs.IntVar(&cfg.Batch, "batch", 10, "mutations per push")
	fs.IntVar(&largeMin, "large-min-kib", 100, "smallest large item, KiB")
	fs.IntVar(&largeMax, "large-max-kib", 500, "largest large item, KiB")
	fs.StringVar(&mix, "mix", mixString(loadgen.DefaultMix), "weights of the mutation kinds")
	fs.IntVar(&cfg.Partitions, "partitions", 6, "partitions of the run's topics")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the mutations (same seed, same records)")
	fs.StringVar(&out, "out", "bench-results", "directory of the results: a subdirectory per run with report.md, latency.png and canon.log")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run's topics, consumer groups and ClickHouse database")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", fs.Args())}
	}
	if brokers != "" {
		cfg.Brokers = strings.Split(brokers, ",")
	}
	cfg.LargeMin, cfg.LargeMax = largeMin<<10, largeMax<<10
	var err error
	if cfg.Mix, err = parseMix(mix); err != nil {
		return usageError{err}
	}
	if _, err := os.Stat(cfg.Canon); err != nil {
		return usageError{fmt.Errorf("--canon %s: %w (build it with `make build`)", cfg.Canon, err)}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}

	dir := filepath.Join(out, time.Now().UTC().Format("20060102T150405Z"))
	cfg.Dir = dir
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	mdPath := filepath.Join(dir, "report.md")
	md, err := os.Create(mdPath)
	if err != nil {
		return err
	}
	if err := rep.WriteMarkdown(md); err != nil {
		md.Close()
		return err
	}
	if err := md.Close(); err != nil {
		return err
	}
	pngPath := filepath.Join(dir, "latency.png")
	if err := rep.SavePlot(pngPath); err != nil {
		return err
	}
	if err := rep.WriteMarkdown(os.Stdout); err != nil {
		return err
	}
	fmt.Printf("\nwritten: %s, %s (canon's log: %s)\n", mdPath, pngPath, filepath.Join(dir, "canon.log"))
	return nil
}

var mixKeys = []string{"put", "patch", "splice", "large-splice", "large-put"}

func mixFields(m *loadgen.Mix) []*int {
	return []*int{&m.Put, &m.Patch, &m.Splice, &m.LargeSplice, &m.LargePut}
}

func mixString(m loadgen.Mix) string {
	parts := make([]string, len(mixKeys))
	for i, f := range mixFields(&m) {
		parts[i] = mixKeys[i] + "=" + strconv.Itoa(*f)
	}
	return strings.Join(parts, ",")
}

// parseMix reads "put=40,patch=25,…"; kinds left out weigh 0.
func parseMix(s string) (loadgen.Mix, error) {
	var m loadgen.Mix
	fields := mixFields(&m)
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		i := indexOf(mixKeys, k)
		n, err := strconv.Atoi(v)
		if !ok || i < 0 || err != nil || n < 0 {
			return m, fmt.Errorf("--mix %q: %q is not KIND=WEIGHT with KIND one of %s and WEIGHT ≥ 0", s, part, strings.Join(mixKeys, ", "))
		}
		*fields[i] = n
	}
	return m, nil
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
