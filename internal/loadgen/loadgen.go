// Package loadgen is Canon's end-to-end load generator. It starts `canon
// serve` (producer, sequencer, readapi and projector roles) as a child
// process against a real Kafka broker and a real ClickHouse, runs N Go
// clients (package client) over M projects with a mix of small edits and
// edits of large items, and measures:
//
//   - throughput of decided mutations;
//   - push → websocket latency: from the start of a push to the version
//     that holds the mutation arriving on the project's websocket;
//   - push → applied: from the start of a push to its ?wait=applied answer;
//   - ClickHouse visibility lag: from a version's arrival on the websocket
//     to its first sight in the history tables;
//   - the Canon process's CPU time, Go heap allocation and RSS.
//
// Then, in the same run, it produces the very same mutation records
// straight to Kafka with franz-go and consumes them back (a raw
// produce → consume baseline, same clients, same batches) and reports the
// ratio.
//
// Everything it creates (topics with a unique prefix, consumer groups, a
// ClickHouse database) is deleted at the end unless Config.Keep is set.
package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/chserver"
)

// Config configures a run. Zero fields take the defaults in parentheses.
type Config struct {
	// Brokers are the Kafka seed brokers (required).
	Brokers []string
	// ClickHouse is the native protocol host:port of a ClickHouse whose
	// user default has no password (required by the mix workload; the
	// edits workload runs without the projector role and ClickHouse).
	ClickHouse string
	// Canon is the path of the canon binary (required).
	Canon string

	// Workload is WorkloadMix (the default) or WorkloadEdits.
	Workload string
	// Rate, when set, spaces the pushes to this many per second over all
	// clients (each still waits for its answer before the next); without
	// it the clients push as fast as they are answered.
	Rate float64
	// CanonArgs are added to `canon serve`'s flags (to compare settings).
	CanonArgs []string
	// Profile, when set, records a CPU profile of canon of this length
	// from the start of the pushes into Dir/canon.cpu.pprof, and the Go
	// heap allocations of the same span into Dir/canon.allocs.pprof.
	Profile time.Duration

	// Clients push concurrently (8); with no more projects than clients,
	// client i writes project i mod Projects, otherwise projects i,
	// i+Clients, … in turn (edits workload only).
	Clients int
	// Projects are written (4): the documents.
	Projects int
	// Duration is how long the clients push (45s), unless Mutations is set.
	Duration time.Duration
	// Mutations, when set, is how many mutations each client pushes; the
	// run then ends after them, whatever Duration says.
	Mutations int
	// Batch is the mutations of one push (10); a push waits for its
	// outcomes before the client sends the next.
	Batch int
	// LargeMin and LargeMax bound the size of each client's large item in
	// bytes (100 KiB, 500 KiB).
	LargeMin, LargeMax int
	// Mix weighs the kinds of mutation (DefaultMix).
	Mix Mix
	// Partitions of the run's topics (6).
	Partitions int
	// Seed makes the mutations (1); same seed, same records.
	Seed uint64
	// PollInterval is how often ClickHouse is polled for new versions
	// (100ms): the resolution of the visibility lag.
	PollInterval time.Duration
	// DrainTimeout bounds the wait for the websockets and ClickHouse to
	// show every mutation after the clients stopped (2m).
	DrainTimeout time.Duration
	// Dir receives canon's log (canon.log); empty: a temporary directory,
	// removed at the end.
	Dir string
	// Keep keeps the run's topics, groups and ClickHouse database.
	Keep bool
	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// Validate fills in the defaults and checks the config.
func (c *Config) Validate() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Clients, 8)
	def(&c.Projects, 4)
	if c.Workload == "" {
		c.Workload = WorkloadMix
	}
	if c.Workload == WorkloadEdits {
		c.Batch = 1
	}
	def(&c.Batch, 10)
	def(&c.LargeMin, 100<<10)
	def(&c.LargeMax, 500<<10)
	def(&c.Partitions, 6)
	if c.Duration == 0 {
		c.Duration = 45 * time.Second
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 2 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers: pass --brokers host:port (or set CANON_TEST_KAFKA_BROKERS)"))
	}
	if c.Workload != WorkloadMix && c.Workload != WorkloadEdits {
		errs = append(errs, fmt.Errorf("workload %q: pass %s or %s", c.Workload, WorkloadMix, WorkloadEdits))
	}
	if c.ClickHouse == "" && c.Workload == WorkloadMix {
		errs = append(errs, errors.New("no ClickHouse: pass --clickhouse host:port (or set CANON_TEST_CLICKHOUSE_ADDR)"))
	}
	if c.Canon == "" {
		errs = append(errs, errors.New("no canon binary: pass --canon PATH (`make build` makes bin/canon)"))
	}
	if c.Clients < 1 || c.Projects < 1 || (c.Projects > c.Clients && c.Workload == WorkloadMix) {
		errs = append(errs, fmt.Errorf("%d clients over %d projects: pass at least 1 client and 1 project, and no more projects than clients (or --workload %s)", c.Clients, c.Projects, WorkloadEdits))
	}
	if c.Batch < 1 || c.Batch > 1000 {
		errs = append(errs, fmt.Errorf("batch %d: pass 1 to 1000 mutations per push", c.Batch))
	}
	if c.LargeMin < 1<<10 || c.LargeMax < c.LargeMin || c.LargeMax > 900<<10 {
		errs = append(errs, fmt.Errorf("large items of %d to %d bytes: pass 1 KiB ≤ min ≤ max ≤ 900 KiB (an item's data is at most 1 MiB)", c.LargeMin, c.LargeMax))
	}
	if c.Mix.Put < 0 || c.Mix.Patch < 0 || c.Mix.Splice < 0 || c.Mix.LargeSplice < 0 || c.Mix.LargePut < 0 || c.Mix.total() == 0 {
		errs = append(errs, fmt.Errorf("mix %s: weights must be ≥ 0 with a positive sum", c.Mix))
	}
	if c.Duration < 0 || c.Mutations < 0 {
		errs = append(errs, fmt.Errorf("duration %s, mutations %d: neither may be negative", c.Duration, c.Mutations))
	}
	if c.Rate < 0 || c.Profile < 0 {
		errs = append(errs, fmt.Errorf("rate %g, profile %s: neither may be negative", c.Rate, c.Profile))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("%d partitions: pass at least 1", c.Partitions))
	}
	return errors.Join(errs...)
}

// Run runs the load against Canon and the raw baseline and returns the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	r := &run{
		cfg:      cfg,
		id:       id,
		prefix:   "bench-" + id + ".",
		database: "bench_" + id,
		org:      "bench",
		log:      cfg.Log,
	}
	for p := range cfg.Projects {
		r.projects = append(r.projects, fmt.Sprintf("r%s-p%d", id, p))
	}
	tmp, err := os.MkdirTemp("", "canon-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := cfg.Dir
	if dir == "" {
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the output dir: %w", err)
	}
	defer r.cleanup()

	keysPath := filepath.Join(tmp, "keys.json")
	r.keys = auth.NewKeyset()
	if err := r.keys.Generate("bench"); err != nil {
		return nil, err
	}
	if err := r.keys.Save(keysPath); err != nil {
		return nil, err
	}
	r.log.Info("starting canon serve", "topics", r.prefix+"canon.*", "database", r.database)
	args := []string{"serve",
		"--roles", "producer,sequencer,readapi,projector",
		"--brokers", strings.Join(cfg.Brokers, ","),
		"--topic-prefix", r.prefix,
		"--topic-partitions", fmt.Sprint(cfg.Partitions),
		"--clickhouse", cfg.ClickHouse,
		"--clickhouse-database", r.database,
		"--data", filepath.Join(tmp, "data"),
		"--keys", keysPath,
		"--log-format", "json",
	}
	if cfg.Workload == WorkloadEdits {
		// The write path and its subscribers only: no history projector,
		// as the server it is set beside has none.
		args = []string{"serve",
			"--roles", "producer,sequencer,readapi",
			"--brokers", strings.Join(cfg.Brokers, ","),
			"--topic-prefix", r.prefix,
			"--topic-partitions", fmt.Sprint(cfg.Partitions),
			"--data", filepath.Join(tmp, "data"),
			"--keys", keysPath,
			"--log-format", "json",
		}
	}
	if cfg.Profile > 0 {
		args = append(args, "--pprof")
	}
	args = append(args, cfg.CanonArgs...)
	r.canon, err = startCanon(ctx, cfg.Canon, args, filepath.Join(dir, "canon.log"))
	if err != nil {
		return nil, err
	}
	r.brokerPID = brokerPID(cfg.Brokers)
	if cfg.Workload == WorkloadMix {
		r.chPID = brokerPID([]string{cfg.ClickHouse}) // the process listening on its port
	}
	if cfg.Workload == WorkloadMix {
		r.ch, err = clickhouse.Open(chserver.Options(cfg.ClickHouse, "default"))
		if err != nil {
			return nil, fmt.Errorf("open ClickHouse %s: %w", cfg.ClickHouse, err)
		}
	}
	r.dir = dir

	rep := &Report{Config: cfg, Started: time.Now().UTC(), TopicPrefix: r.prefix, Database: r.database}
	rep.Config.Log = nil
	rep.Canon, err = r.runCanon(ctx)
	if err != nil {
		if ended, exitErr := r.canon.exited(); ended {
			err = fmt.Errorf("%w (canon serve exited: %w; its log %s ends with:\n%s)", err, exitErr, r.canon.log, tail(r.canon.log, 30))
		}
		return nil, err
	}
	r.canon.stop()
	r.log.Info("raw Kafka baseline: the same records, produced and consumed with franz-go")
	rep.Raw, err = r.runRaw(ctx, rep.Canon.pushes)
	if err != nil {
		return nil, fmt.Errorf("raw Kafka baseline: %w", err)
	}
	return rep, nil
}

// run is the state of one run.
type run struct {
	cfg      Config
	id       string
	prefix   string
	database string
	org      string
	projects []string
	keys     *auth.Keyset
	canon    *canonProc
	ch       clickhouse.Conn // nil in the edits workload
	dir      string
	// brokerPID is the local broker's process, for its CPU time; 0 when
	// it was not found.
	brokerPID int
	// chPID is the local ClickHouse server's process (mix workload), for
	// its CPU time; 0 when it was not found.
	chPID int
	log   *slog.Logger
}

func clientName(i int) string { return fmt.Sprintf("c%d", i) }

func (r *run) token(subject string, projects []string, scope string) (string, error) {
	c := auth.Claims{Org: r.org, Projects: projects, Scopes: []string{scope}}
	c.Subject = subject
	return r.keys.Issue(c, 24*time.Hour, time.Now())
}

// cleanup stops canon and deletes what the run created.
func (r *run) cleanup() {
	if r.canon != nil {
		r.canon.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r.ch != nil {
		if !r.cfg.Keep {
			if err := r.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+r.database); err != nil {
				r.log.Warn("drop the run's ClickHouse database", "database", r.database, "err", err)
			}
		}
		r.ch.Close()
	}
	if r.cfg.Keep {
		r.log.Info("kept the run's topics, groups and database", "prefix", r.prefix, "database", r.database)
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.cfg.Brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if topics, err := adm.ListTopics(ctx); err == nil {
		var mine []string
		for _, t := range topics.Names() {
			if strings.HasPrefix(t, r.prefix) {
				mine = append(mine, t)
			}
		}
		if len(mine) > 0 {
			if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
				r.log.Warn("delete the run's topics", "err", err)
			}
		}
	}
	if groups, err := adm.ListGroups(ctx); err == nil {
		var mine []string
		for _, g := range groups.Groups() {
			if strings.HasPrefix(g, r.prefix) {
				mine = append(mine, g)
			}
		}
		if len(mine) > 0 {
			r.removeStaticMembers(ctx, adm, mine)
			if _, err := adm.DeleteGroups(ctx, mine...); err != nil {
				r.log.Warn("delete the run's consumer groups", "err", err)
			}
		}
	}
}

// removeStaticMembers removes the members with an instance id from the
// groups: the sequencer joins with static membership, so a stopped Canon
// stays a member until its session times out, and a group with members
// cannot be deleted.
func (r *run) removeStaticMembers(ctx context.Context, adm *kadm.Client, groups []string) {
	described, err := adm.DescribeGroups(ctx, groups...)
	if err != nil {
		r.log.Warn("describe the run's consumer groups", "err", err)
		return
	}
	for _, g := range described.Sorted() {
		var ids []string
		for _, m := range g.Members {
			if m.InstanceID != nil {
				ids = append(ids, *m.InstanceID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		if _, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(g.Group).InstanceIDs(ids...).Reason("the load run is over")); err != nil {
			r.log.Warn("remove the static members of a consumer group", "group", g.Group, "err", err)
		}
	}
}
