package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/projector/history"
)

// clickhouseFlags are the flags of the ClickHouse history tables and of
// the projector role.
type clickhouseFlags struct {
	addr         []string
	database     string
	user         string
	password     string
	passwordFile string
	tls          bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	// batchRows, batchBytes and batchInterval bound the projector's
	// batches.
	batchRows     int
	batchBytes    int
	batchInterval time.Duration
	// sessionTimeout is hidden: failure tests shorten it.
	sessionTimeout time.Duration
	// optional is set for `canon dev`: the projector runs only when
	// --clickhouse is given.
	optional bool
	out      io.Writer
	// localDir is set when `canon dev` started the ClickHouse at addr
	// itself, with its data there; offNote says why the history is off.
	localDir, offNote string
}

// activeClickHouse holds the ClickHouse flags of the command this process
// runs (set before it runs), for the projector role's setup.
var activeClickHouse atomic.Pointer[clickhouseFlags]

// registerClickHouseFlags adds the ClickHouse flags to a command that may
// run the projector role (serve, dev).
func registerClickHouseFlags(cmd *cobra.Command) {
	f := &clickhouseFlags{optional: cmd.Name() == "dev"}
	f.register(cmd)
	cmd.Flags().IntVar(&f.batchRows, "projector-batch-rows", history.DefaultBatchRows, "projector: insert a batch when it holds this many rows")
	cmd.Flags().IntVar(&f.batchBytes, "projector-batch-bytes", history.DefaultBatchBytes, "projector: insert a batch when its bodies, chunks and args reach this many bytes")
	cmd.Flags().DurationVar(&f.batchInterval, "projector-batch-interval", history.DefaultBatchInterval, "projector: insert a batch when its first record is this old (analysts see a version up to this long after its commit)")
	cmd.Flags().DurationVar(&f.sessionTimeout, "projector-session-timeout", 0, "projector group session timeout (0: franz-go's default)")
	_ = cmd.Flags().MarkHidden("projector-session-timeout")
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		f.out = c.OutOrStdout()
		activeClickHouse.Store(f)
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// register adds the connection flags (shared with migrate and backfill).
func (f *clickhouseFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.addr, "clickhouse", nil, "ClickHouse native protocol address, host:port (e.g. localhost:9000)")
	cmd.Flags().StringVar(&f.database, "clickhouse-database", history.DefaultDatabase, "ClickHouse database of the history tables (created if missing)")
	cmd.Flags().StringVar(&f.user, "clickhouse-user", "default", "ClickHouse user")
	cmd.Flags().StringVar(&f.password, "clickhouse-password", "", "ClickHouse password (better: --clickhouse-password-file or CANON_CLICKHOUSE_PASSWORD)")
	cmd.Flags().StringVar(&f.passwordFile, "clickhouse-password-file", "", "file holding the ClickHouse password")
	cmd.Flags().BoolVar(&f.tls, "clickhouse-tls", false, "connect to ClickHouse with TLS (its secure native port; implied by the other --clickhouse-tls-… flags)")
	cmd.Flags().StringVar(&f.tlsCA, "clickhouse-tls-ca", "", "PEM file of the CAs that sign ClickHouse's certificate (default: the system's)")
	cmd.Flags().StringVar(&f.tlsCert, "clickhouse-tls-cert", "", "PEM client certificate for ClickHouse")
	cmd.Flags().StringVar(&f.tlsKey, "clickhouse-tls-key", "", "PEM key of --clickhouse-tls-cert")
}

// config is the ClickHouse connection of the flags, with the files they
// name read; its errors are usage errors.
func (f *clickhouseFlags) config() (history.ClickHouseConfig, error) {
	cfg := history.ClickHouseConfig{Addr: f.addr, Database: f.database, Username: f.user, Password: f.password}
	if f.passwordFile != "" {
		if f.password != "" {
			return cfg, usageError{errors.New("both --clickhouse-password and --clickhouse-password-file are set: keep one")}
		}
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return cfg, usageError{fmt.Errorf("read the ClickHouse password (--clickhouse-password-file): %w", err)}
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	}
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" {
		// The same PEM files as Kafka's; only the flags differ.
		sec := kafka.SecurityConfig{TLS: true, CAFile: f.tlsCA, CertFile: f.tlsCert, KeyFile: f.tlsKey}
		var kc kafka.ClientConfig
		if err := sec.Apply(&kc); err != nil {
			msg := strings.NewReplacer("--kafka-tls", "--clickhouse-tls", "Kafka", "ClickHouse").Replace(err.Error())
			return cfg, usageError{errors.New(msg)}
		}
		cfg.TLS = kc.TLS
	}
	return cfg, nil
}

// newProjectorCmd is `canon projector`: tools of the history projector.
func newProjectorCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "projector",
		Short: "Tools of the ClickHouse history projector (backfill)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBackfillCmd(g))
	return cmd
}

type backfillFlags struct {
	kafka kafkaFlags
	ch    clickhouseFlags
	group string
	json  bool
	keep  bool
	batch int
}

func newBackfillCmd(g *globalFlags) *cobra.Command {
	f := &backfillFlags{}
	cmd := &cobra.Command{
		Use:   "backfill --brokers HOST:PORT --clickhouse HOST:PORT",
		Short: "Project all of canon.versions into ClickHouse with a new consumer group",
		Long: `Project canon.versions from its earliest offset up to its end offsets at the
start, with a consumer group of its own, and stop there. Use it to fill a new
database (--clickhouse-database) after a schema change or a loss, while the
running projectors go on; rows that both insert collapse.

Progress goes to stderr as a bar when stderr is a terminal; --json prints one
JSON object per second to stdout instead. An interrupted backfill resumes
where it stopped when run again with the same --group. When it completes,
its group is deleted (--keep-group keeps it).`,
		Example: `  canon projector backfill --brokers kafka:9092 --clickhouse clickhouse:9000 --clickhouse-database canon_v2`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return runBackfill(cmd.Context(), cmd, f, log)
		},
	}
	f.kafka.register(cmd, "Kafka brokers, host:port, comma separated (required)")
	f.ch.register(cmd)
	cmd.Flags().StringVar(&f.group, "group", "", "consumer group of the backfill (default: canon-projector-history-backfill-<time>, prefixed by --topic-prefix)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print progress as JSON lines on stdout")
	cmd.Flags().BoolVar(&f.keep, "keep-group", false, "keep the backfill's consumer group when it completes")
	cmd.Flags().IntVar(&f.batch, "batch-rows", history.DefaultBatchRows, "insert a batch when it holds this many rows")
	return cmd
}

func runBackfill(ctx context.Context, cmd *cobra.Command, f *backfillFlags, log *slog.Logger) error {
	if len(f.kafka.brokers) == 0 {
		return usageError{fmt.Errorf("no Kafka brokers: pass --brokers host:port (or set CANON_BROKERS)")}
	}
	if len(f.ch.addr) == 0 {
		return usageError{fmt.Errorf("no ClickHouse: pass --clickhouse host:port (native protocol) or set CANON_CLICKHOUSE")}
	}
	group := f.group
	if group == "" {
		group = f.kafka.topicPrefix + history.DefaultGroup + "-backfill-" + time.Now().UTC().Format("20060102T150405")
	}
	kcfg, err := f.kafka.clientConfig("canon-backfill", nil)
	if err != nil {
		return err
	}
	chcfg, err := f.ch.config()
	if err != nil {
		return err
	}
	cfg := history.Config{
		Kafka:      kcfg,
		Topics:     kafka.DefaultTopicNames().WithPrefix(f.kafka.topicPrefix),
		Group:      group,
		ClickHouse: chcfg,
		BatchRows:  f.batch,
		Log:        log,
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	log.Info("backfill started", "group", group, "topic", cfg.Topics.Versions, "database", f.ch.database)

	stderr := cmd.ErrOrStderr()
	var bar *progressbar.ProgressBar
	if file, ok := stderr.(*os.File); ok && !f.json && term.IsTerminal(int(file.Fd())) {
		bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription("backfill "+cfg.Topics.Versions),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("records"),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	report := func(p history.Progress) {
		switch {
		case f.json:
			_ = enc.Encode(map[string]any{"done": p.Done, "total": p.Total, "rows": p.Rows, "elapsed_ms": p.Elapsed.Milliseconds()})
		case bar != nil:
			if bar.GetMax64() != p.Total {
				bar.ChangeMax64(p.Total)
			}
			_ = bar.Set64(p.Done)
		}
	}
	pr, err := history.Backfill(ctx, cfg, time.Second, report)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("backfill with group %s (run again with --group %s to resume): %w", group, group, err)
	}
	if !f.keep {
		if err := history.DeleteGroup(ctx, kcfg, group); err != nil {
			return fmt.Errorf("backfill complete, but its group %s was not deleted: %w", group, err)
		}
	}
	if !f.json {
		fmt.Fprintf(out, "backfill complete: %d records of %s, %d rows inserted into %s in %s\n",
			pr.Done, cfg.Topics.Versions, pr.Rows, f.ch.database, pr.Elapsed.Round(time.Millisecond))
	}
	return nil
}
