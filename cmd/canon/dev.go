package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
)

type devFlags struct {
	kafka       kafkaFlags
	data        string
	http        string
	pprof       bool
	kafkaListen string
	clickhouse  devClickHouseFlags
	corsOrigins []string
}

func newDevCmd(g *globalFlags) *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of Canon in one process, with an embedded broker, for development",
		Long: `Run every Canon role in one process, with its state under one data directory.

Unless --brokers is given, an embedded Kafka-protocol broker (franz-go's kfake)
runs inside the process with its logs under DATA/kafka, so nothing else needs
to be installed. Canon's topics are created on first start. Stop with Ctrl-C;
the next start reuses the same data.

Unless --clickhouse is given, an installed clickhouse-server (Debian's
package) is started on 127.0.0.1 with its data under DATA/clickhouse, and the
history projector writes the edit history into it; without one, everything
else runs and the command that installs it is printed.`,
		Example: `  canon dev
  canon dev --data /tmp/canon --http 127.0.0.1:9000
  canon dev --brokers localhost:9092   # use a running Kafka instead
  canon dev --clickhouse localhost:9000   # use a running ClickHouse instead`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return runDev(cmd.Context(), cmd, f, log)
		},
	}
	f.kafka.register(cmd, "Kafka brokers (host:port, comma separated); empty runs the embedded broker")
	registerClickHouseFlags(cmd)
	cmd.Flags().StringVar(&f.data, "data", ".canon", "directory for all of Canon's local state (created if missing)")
	cmd.Flags().StringVar(&f.http, "http", "127.0.0.1:8080", "address of the HTTP server (/healthz, /readyz, /metrics)")
	cmd.Flags().BoolVar(&f.pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on --http (for debugging: keep --http private)")
	cmd.Flags().StringVar(&f.kafkaListen, "kafka-listen", kafka.DefaultEmbeddedListen, "address of the embedded broker")
	f.clickhouse.register(cmd)
	registerCORSFlag(cmd, &f.corsOrigins, devCORSOrigins)
	return cmd
}

func runDev(ctx context.Context, cmd *cobra.Command, f *devFlags, log *slog.Logger) error {
	cors, err := parseCORS(f.corsOrigins)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(f.data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w (pass --data with a writable directory)", err)
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
		emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{
			DataDir:         data,
			Listen:          f.kafkaListen,
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
	}

	n, err := newNode(ctx, log, brokers, &f.kafka, f.http, data)
	if err != nil {
		return err
	}
	n.pprof = f.pprof
	n.cors = cors
	keysPath := filepath.Join(data, "keys.json")
	keys, err := devKeyset(keysPath)
	if err != nil {
		return err
	}
	n.keys = keys
	devClaims := auth.Claims{Org: "dev", Projects: []string{"*"}, Scopes: []string{auth.ScopeAdmin}}
	devClaims.Subject = "dev"
	devToken, err := keys.Issue(devClaims, 30*24*time.Hour, time.Now())
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "\nCanon dev is running. Stop it with Ctrl-C; the next start reuses the data.\n\n")
	fmt.Fprintf(w, "  data        %s\n", data)
	fmt.Fprintf(w, "  kafka       %s (%s)\n", strings.Join(brokers, ","), kafkaNote)
	fmt.Fprintf(w, "  topics      %s, %s, %s (%d partitions)\n",
		n.topics.Names.Mutations, n.topics.Names.Versions, n.topics.Names.Rejected, n.topics.Partitions)
	base := "http://" + n.httpLn.Addr().String()
	fmt.Fprintf(w, "  health      %s/healthz  %s/readyz\n", base, base)
	fmt.Fprintf(w, "  metrics     %s/metrics\n", base)
	fmt.Fprintf(w, "  web UI      %s/ui/#token=%s\n              (open it in two tabs and edit a project in both)\n", base, devToken)
	fmt.Fprintf(w, "  keys        %s (more tokens: canon token issue --keys %s …)\n", keysPath, keysPath)
	fmt.Fprintf(w, "  dev token   %s\n              (org dev, all projects, admin, 30 days)\n", devToken)
	log.Info("canon dev started", "version", versionString(), "http", n.httpLn.Addr().String(), "brokers", brokers)

	// Every role, in one process.
	names := slices.Sorted(maps.Keys(roles))
	components, err := setupRoles(n, names)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  roles       %s\n", strings.Join(names, ", "))
	printTryIt(w, base, devToken)
	err = n.run(ctx, components...)
	log.Info("canon dev stopping")
	return err
}
