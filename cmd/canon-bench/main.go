// Command canon-bench is Canon's end-to-end benchmark: it runs `canon
// serve` against a real Kafka and ClickHouse under a load of Go clients
// (package internal/loadgen), then the same records through Kafka alone,
// and writes a markdown report and a plot of latency over time.
//
//	go run ./internal/testenv/run -- go run ./cmd/canon-bench --canon bin/canon
//
// `make bench` does that with defaults sized for a small machine.
//
// --workload edits is the side-by-side shape of issue 22: one field edit
// per push, one in flight per writer, a websocket per document; --rate
// paces it. --runs and --variant repeat runs, interleaving settings of
// canon serve, and print the medians:
//
//	canon-bench --workload edits --projects 100 --runs 3 \
//	  --variant today= --variant nosync=--store-sync=never
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
	"slices"
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
		runs               int
		variants           variantFlag
	)
	fs := flag.NewFlagSet("canon-bench", flag.ContinueOnError)
	fs.StringVar(&brokers, "brokers", os.Getenv("CANON_TEST_KAFKA_BROKERS"), "Kafka brokers, host:port, comma separated (default $CANON_TEST_KAFKA_BROKERS)")
	fs.StringVar(&cfg.ClickHouse, "clickhouse", os.Getenv("CANON_TEST_CLICKHOUSE_ADDR"), "ClickHouse native host:port, user default without password (default $CANON_TEST_CLICKHOUSE_ADDR)")
	fs.StringVar(&cfg.Canon, "canon", "bin/canon", "the canon binary to run (make build)")
	fs.StringVar(&cfg.Workload, "workload", loadgen.WorkloadMix, "mix: batches of the --mix kinds; edits: one field edit per push, waiting for applied, a websocket per document (no ClickHouse)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "pushes per second over all clients (0: as fast as they are answered)")
	fs.DurationVar(&cfg.Profile, "profile", 0, "record a CPU profile and a profile of the Go heap allocations of canon this long from the start of the pushes (canon.cpu.pprof, canon.allocs.pprof in the run's directory)")
	fs.IntVar(&runs, "runs", 1, "runs of each variant, interleaved; with more than one, a table of medians ends the output")
	fs.Var(&variants, "variant", "NAME=FLAGS: a setting of canon serve to compare, FLAGS added to its command line (repeatable; default one variant without extra flags)")
	fs.IntVar(&cfg.Projects, "projects", 4, "projects (documents) the clients write (client i writes project i mod N; with --workload edits and more projects than clients, projects i, i+clients, … in turn)")
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
	if runs < 1 {
		return usageError{fmt.Errorf("--runs %d: pass at least 1", runs)}
	}
	if len(variants) == 0 {
		variants = append(variants, variant{})
	}

	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stamp := time.Now().UTC().Format("20060102T150405Z")
	summaries := make([][]loadgen.Summary, len(variants))
	for k := range runs {
		for v, vr := range variants {
			dir := filepath.Join(out, stamp)
			if runs > 1 || len(variants) > 1 {
				dir = filepath.Join(out, stamp, fmt.Sprintf("%d-%s", k+1, vr.label()))
			}
			c := cfg
			c.Dir, c.CanonArgs = dir, vr.args
			cfg.Log.Info("run", "n", k+1, "of", runs, "variant", vr.label())
			rep, err := runOne(ctx, c)
			if err != nil {
				return fmt.Errorf("run %d of variant %s: %w", k+1, vr.label(), err)
			}
			summaries[v] = append(summaries[v], rep.Summary())
		}
	}
	if runs > 1 || len(variants) > 1 {
		path := filepath.Join(out, stamp, "summary.md")
		var b strings.Builder
		writeSummary(&b, cfg, variants, summaries)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Printf("\n%s\nwritten: %s\n", b.String(), path)
	}
	return nil
}

// runOne runs the load once and writes its report and plot into cfg.Dir.
func runOne(ctx context.Context, cfg loadgen.Config) (*loadgen.Report, error) {
	dir := cfg.Dir
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	mdPath := filepath.Join(dir, "report.md")
	md, err := os.Create(mdPath)
	if err != nil {
		return nil, err
	}
	if err := rep.WriteMarkdown(md); err != nil {
		md.Close()
		return nil, err
	}
	if err := md.Close(); err != nil {
		return nil, err
	}
	pngPath := filepath.Join(dir, "latency.png")
	if err := rep.SavePlot(pngPath); err != nil {
		return nil, err
	}
	if err := rep.WriteMarkdown(os.Stdout); err != nil {
		return nil, err
	}
	fmt.Printf("\nwritten: %s, %s (canon's log: %s)\n", mdPath, pngPath, filepath.Join(dir, "canon.log"))
	return rep, nil
}

// variant is a setting of canon serve to compare: a name and the flags
// it adds.
type variant struct {
	name string
	args []string
}

func (v variant) label() string {
	if v.name == "" {
		return "default"
	}
	return v.name
}

// variantFlag is the repeatable --variant NAME=FLAGS.
type variantFlag []variant

func (f *variantFlag) String() string {
	parts := make([]string, len(*f))
	for i, v := range *f {
		parts[i] = v.name + "=" + strings.Join(v.args, " ")
	}
	return strings.Join(parts, ", ")
}

func (f *variantFlag) Set(s string) error {
	name, args, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.ContainsAny(name, "/ ") {
		return fmt.Errorf("%q is not NAME=FLAGS (NAME without / or spaces; FLAGS may be empty)", s)
	}
	*f = append(*f, variant{name: name, args: strings.Fields(args)})
	return nil
}

// writeSummary writes the medians of each variant's runs, with each
// variant's ratios to the first variant.
func writeSummary(b *strings.Builder, cfg loadgen.Config, variants []variant, sums [][]loadgen.Summary) {
	fmt.Fprintf(b, "## Medians of %d interleaved runs (%s workload, %d clients, %d projects", len(sums[0]), cfg.Workload, cfg.Clients, cfg.Projects)
	if cfg.Rate > 0 {
		fmt.Fprintf(b, ", %.0f pushes/s", cfg.Rate)
	}
	b.WriteString(")\n\nRatios to the raw baseline are per run (same run), then the median.\n\n")
	b.WriteString("| variant | mutations/s | raw records/s | Canon / raw | CPU µs per mutation: canon + broker = total | raw broker µs/record | push → websocket p50 / p99 ms | raw p50 ms | mutations per transaction |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, v := range variants {
		m := func(get func(loadgen.Summary) float64) float64 {
			xs := make([]float64, len(sums[i]))
			for j, s := range sums[i] {
				xs[j] = get(s)
			}
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		fmt.Fprintf(b, "| %s `%s` | %.0f | %.0f | %.2f | %.0f + %.0f = %.0f | %.0f | %.2f / %.2f | %.2f | %.2f |\n", v.label(), strings.Join(v.args, " "),
			m(func(s loadgen.Summary) float64 { return s.Throughput }), m(func(s loadgen.Summary) float64 { return s.Raw }),
			m(func(s loadgen.Summary) float64 { return s.Ratio }),
			m(func(s loadgen.Summary) float64 { return s.CanonCPU }), m(func(s loadgen.Summary) float64 { return s.BrokerCPU }),
			m(func(s loadgen.Summary) float64 { return s.TotalCPU }), m(func(s loadgen.Summary) float64 { return s.RawBrokerCPU }),
			m(func(s loadgen.Summary) float64 { return s.P50 }), m(func(s loadgen.Summary) float64 { return s.P99 }),
			m(func(s loadgen.Summary) float64 { return s.RawP50 }), m(func(s loadgen.Summary) float64 { return s.PerTransaction }))
	}
	b.WriteString("\nEach run, in order:\n\n")
	for k := range sums[0] {
		for i, v := range variants {
			s := sums[i][k]
			ch := ""
			if s.ClickHouseCPU > 0 {
				ch = fmt.Sprintf(" (ClickHouse %.0f µs)", s.ClickHouseCPU)
			}
			if s.LoadCPU > 0 {
				ch += fmt.Sprintf(", load generator %.0f µs", s.LoadCPU)
			}
			if s.ClickHouseInserted > 0 {
				ch += fmt.Sprintf(", ClickHouse KB inserted %.1f, merged %.1f per mutation", s.ClickHouseInserted, s.ClickHouseMerged)
			}
			kb := ""
			if s.BrokerIn+s.BrokerOut > 0 {
				kb = fmt.Sprintf(", broker KB in / out %.2f / %.2f per mutation (raw %.2f / %.2f per record)", s.BrokerIn, s.BrokerOut, s.RawIn, s.RawOut)
			}
			fmt.Fprintf(b, "- run %d %s: %.0f mutations/s (raw %.0f, %.2f×), CPU %.0f + %.0f µs%s, p50 %.2f ms, p99 %.2f ms, %.2f mutations per transaction%s\n",
				k+1, v.label(), s.Throughput, s.Raw, s.Ratio, s.CanonCPU, s.BrokerCPU, ch, s.P50, s.P99, s.PerTransaction, kb)
		}
	}
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
