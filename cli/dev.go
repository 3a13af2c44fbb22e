package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
)

type devFlags struct {
	kafka       kafkaFlags
	bundles     bundleFlags
	data        string
	http        string
	pprof       bool
	storeSync   string
	kafkaListen string
	kafkaPort   int
	clickhouse  devClickHouseFlags
	corsOrigins []string
	ckpt        checkpointFlags
	app         devAppFlags
}

func newDevCmd(g *globalFlags) *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of Canon in one process, with an embedded broker, for development",
		Long: `Run every Canon role in one process, with its state under one data directory.

Unless --brokers is given, an embedded Kafka-protocol broker (franz-go's kfake)
runs inside the process with its logs under DATA/kafka, so nothing else needs
to be installed. It listens on 127.0.0.1:9092, or on a free port when 9092 is
taken (a Kafka of your own): the banner says which. Canon's topics are created
on first start. Stop with Ctrl-C; the next start reuses the same data, on
whatever port.

The data directory and everything in it is readable by your user only: it
holds every mutation and item body.

The banner with the addresses and the dev token is printed once Canon is
ready (/readyz), after the start's log lines. The Kafka client library logs
warnings and errors only (--kafka-log-level), Canon from --log-level.

Unless --clickhouse is given, an installed clickhouse-server (Debian's
package) is started on 127.0.0.1 with its data under DATA/clickhouse, and the
history projector writes the edit history into it; without one, everything
else runs and the command that installs it is printed.`,
		Example: `  canon dev
  canon dev --data /tmp/canon --http 127.0.0.1:9000
  canon dev --kafka-port 19092   # the embedded broker on another port
  canon dev --brokers localhost:9092   # use a running Kafka instead
  canon dev --clickhouse localhost:9000   # use a running ClickHouse instead
  canon dev --app examples/todo/app --app-mutators examples/todo/mutators.ts --app-project todo
                                          # the todo example app at /app/ (make todo)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			mutators, err := g.opts.registry()
			if err != nil {
				return err
			}
			return runDev(cmd.Context(), cmd, f, mutators, log)
		},
	}
	f.kafka.register(cmd, "Kafka brokers (host:port, comma separated); empty runs the embedded broker")
	registerClickHouseFlags(cmd)
	f.bundles.register(cmd)
	cmd.Flags().StringVar(&f.data, "data", ".canon", "directory for all of Canon's local state (created if missing)")
	cmd.Flags().StringVar(&f.http, "http", "127.0.0.1:8080", "address of the HTTP server (/healthz, /readyz, /metrics)")
	cmd.Flags().BoolVar(&f.pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on --http (for debugging: keep --http private)")
	registerStoreSyncFlag(cmd, &f.storeSync)
	cmd.Flags().IntVar(&f.kafkaPort, "kafka-port", defaultDevKafkaPort,
		"port of the embedded broker on 127.0.0.1 (0: a free one; a busy port is replaced by a free one, which the banner names)")
	cmd.Flags().StringVar(&f.kafkaListen, "kafka-listen", "",
		"address of the embedded broker, host:port; replaces --kafka-port, and a busy one is an error")
	f.clickhouse.register(cmd)
	registerCORSFlag(cmd, &f.corsOrigins, devCORSOrigins)
	f.ckpt.register(cmd, "object store of partition checkpoints, file:///DIR or s3://BUCKET?region=R (default: the directory checkpoints/ under --data)")
	f.app.register(cmd)
	return cmd
}

func runDev(ctx context.Context, cmd *cobra.Command, f *devFlags, mutators *model.Registry, log *slog.Logger) error {
	cors, err := parseCORS(f.corsOrigins)
	if err != nil {
		return err
	}
	noSync, err := parseStoreSync(f.storeSync)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(f.data)
	if err != nil {
		return err
	}
	// The app is built first: a mistake in it is told before anything
	// starts.
	app, err := buildDevApp(&f.app)
	if err != nil {
		return err
	}
	// Everything under the data dir is the user's only: the broker's logs
	// and the store hold every item body, keys.json the signing key. The
	// umask covers what Pebble, the embedded broker and the local
	// ClickHouse (a child, which inherits it) create; the chmod an older
	// data dir that was made readable to all.
	syscall.Umask(0o077)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w (pass --data with a writable directory)", err)
	}
	if err := os.Chmod(data, 0o700); err != nil {
		return fmt.Errorf("make the data dir %s private: %w", data, err)
	}
	stopClickHouse, err := startDevClickHouse(ctx, &f.clickhouse, data, log)
	if err != nil {
		return err
	}
	if stopClickHouse != nil {
		defer stopClickHouse()
	}

	brokers := f.kafka.brokers
	kafkaNote := "external"
	if len(brokers) == 0 {
		listen, anyPort := f.kafkaListen, false
		if listen == "" {
			if f.kafkaPort < 0 || f.kafkaPort > 65535 {
				return usageError{fmt.Errorf("--kafka-port %d is not a port: pass 0 to 65535", f.kafkaPort)}
			}
			listen, anyPort = net.JoinHostPort("127.0.0.1", strconv.Itoa(f.kafkaPort)), true
		}
		emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{
			DataDir:         data,
			Listen:          listen,
			AnyPortIfBusy:   anyPort,
			MaxMessageBytes: f.kafka.maxMessageBytes,
			Log:             log,
		})
		if err != nil {
			return err
		}
		defer func() {
			emb.Close()
			log.Info("embedded broker stopped; its data is kept", "dir", filepath.Join(data, "kafka"))
		}()
		brokers = emb.Brokers()
		kafkaNote = "embedded, data in " + filepath.Join(data, "kafka")
		if busy := emb.Busy(); busy != "" {
			log.Warn("the embedded broker's port is busy; using a free one", "busy", busy, "addr", brokers[0])
			_, port, _ := net.SplitHostPort(busy)
			kafkaNote = "embedded; port " + port + " was busy, --kafka-port picks another; data in " + filepath.Join(data, "kafka")
		}
	}

	n, err := newNode(ctx, log, brokers, &f.kafka, f.http, data)
	if err != nil {
		return err
	}
	n.pprof = f.pprof
	n.storeNoSync = noSync
	n.cors = cors
	n.mutators = mutators
	if n.bundleOpts, err = f.bundles.options(); err != nil {
		return err
	}
	n.bundles = newBundleCache(n.bundleOpts)
	if f.ckpt.url == "" {
		f.ckpt.url = devCheckpointURL(data)
	}
	n.checkpoints = &f.ckpt
	keysPath := filepath.Join(data, "keys.json")
	keys, err := devKeyset(keysPath)
	if err != nil {
		return err
	}
	n.keys, n.keysPath = keys, keysPath
	devClaims := auth.Claims{Org: "dev", Projects: []string{"*"}, Scopes: []string{auth.ScopeAdmin}}
	devClaims.Subject = "dev"
	devToken, err := keys.Issue(devClaims, 30*24*time.Hour, time.Now())
	if err != nil {
		return err
	}
	// The banner is printed whole once Canon is ready, after the start's
	// log lines: printed as it was made, log lines split it and the dev
	// token scrolled away.
	var banner bytes.Buffer
	w := &banner
	if ch := activeClickHouse.Load(); ch != nil {
		ch.out = w // the projector role adds the history line
	}
	fmt.Fprintf(w, "\nCanon dev is running. Stop it with Ctrl-C; the next start reuses the data.\n\n")
	fmt.Fprintf(w, "  data        %s\n", data)
	fmt.Fprintf(w, "  kafka       %s (%s)\n", strings.Join(brokers, ","), kafkaNote)
	fmt.Fprintf(w, "  topics      %s, %s, %s (%d partitions)\n",
		n.topics.Names.Mutations, n.topics.Names.Versions, n.topics.Names.Rejected, n.topics.Partitions)
	base := "http://" + n.httpLn.Addr().String()
	fmt.Fprintf(w, "  health      %s/healthz  %s/readyz\n", base, base)
	fmt.Fprintf(w, "  metrics     %s/metrics\n", base)
	fmt.Fprintf(w, "  web UI      %s/ui/#token=%s\n              (open it in two tabs and edit a project in both)\n", base, devToken)
	if app != nil {
		n.mux.Handle(appPrefix, app)
		fmt.Fprintf(w, "  app         %s%s#token=%s\n              (project dev/%s; open it in two tabs)\n", base, appPrefix, devToken, app.project)
	}
	fmt.Fprintf(w, "  keys        %s (more tokens: canon token issue --keys %s …)\n", keysPath, keysPath)
	fmt.Fprintf(w, "  dev token   %s\n              (org dev, all projects, admin, 30 days)\n", devToken)
	log.Info("canon dev started", "version", versionString(), "http", n.httpLn.Addr().String(), "brokers", brokers)

	// Every role, in one process.
	// The roles' setup adds its lines first (the projector's history
	// line); the rest comes once they run.
	names := allRoles()
	rest := func(w io.Writer) {
		fmt.Fprintf(w, "  roles       %s\n", strings.Join(names, ", "))
		printTryIt(w, base, devToken)
	}
	var ready func(context.Context, io.Writer) error
	if app != nil {
		ready = func(ctx context.Context, w io.Writer) error { return app.deploy(ctx, base, devToken, w) }
	}
	err = n.runRoles(ctx, names, component{"banner", printWhenReady(n, cmd.OutOrStdout(), &banner, rest, ready)})
	log.Info("canon dev stopping")
	return err
}

// defaultDevKafkaPort is Kafka's usual port, where clients look first.
const defaultDevKafkaPort = 9092

// bannerWait bounds how long the banner waits for readiness: past it, it
// is printed with what is not ready yet.
const bannerWait = 20 * time.Second

// printWhenReady is a component of canon dev that adds rest to the
// banner, prints it once every readiness check passes (or after
// bannerWait, naming the checks that fail), and then returns. ready, when
// not nil, runs once Canon is ready, before the banner is printed (the
// app's deploy); its error stops canon dev.
func printWhenReady(n *node, out io.Writer, banner *bytes.Buffer, rest func(io.Writer), ready func(context.Context, io.Writer) error) func(context.Context) error {
	return func(ctx context.Context) error {
		rest(banner)
		deadline := time.Now().Add(bannerWait)
		for {
			failed := n.ready.Check(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if len(failed) == 0 || time.Now().After(deadline) {
				if ready != nil {
					if err := ready(ctx, banner); err != nil {
						return err
					}
				}
				for _, name := range slices.Sorted(maps.Keys(failed)) {
					fmt.Fprintf(banner, "  not ready   %s: %v (see /readyz)\n", name, failed[name])
				}
				// One write, so that no log line lands inside it.
				if _, err := out.Write(banner.Bytes()); err != nil {
					return fmt.Errorf("print the banner: %w", err)
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(25 * time.Millisecond):
			}
		}
	}
}
