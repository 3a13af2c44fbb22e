package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// role runs one of Canon's components inside `canon serve`.
type role struct {
	help string
	run  func(ctx context.Context, n *node) error
}

// roles are the components `canon serve --roles` can run. Each issue that
// builds a component adds its role here.
var roles = map[string]role{}

type serveFlags struct {
	kafka kafkaFlags
	http  string
	roles []string
}

func newServeCmd(g *globalFlags) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve --brokers HOST:PORT [--roles ROLE,…]",
		Short: "Run chosen Canon roles against a Kafka cluster",
		Long: `Run the chosen roles of Canon in this process, against a real Kafka cluster.

Every instance checks Canon's topics at start (creating missing ones) and
serves /healthz, /readyz and /metrics on --http. Run several instances with
the same roles to scale out: Kafka's consumer groups share the partitions.`,
		Example: `  canon serve --brokers kafka-1:9092,kafka-2:9092 --http 0.0.0.0:8080`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return runServe(cmd.Context(), f, log)
		},
	}
	f.kafka.register(cmd, "Kafka brokers, host:port, comma separated (required)")
	cmd.Flags().StringVar(&f.http, "http", "127.0.0.1:8080", "address of the HTTP server (/healthz, /readyz, /metrics)")
	cmd.Flags().StringSliceVar(&f.roles, "roles", nil, "roles to run, comma separated: "+knownRoles())
	return cmd
}

func knownRoles() string {
	if len(roles) == 0 {
		return "none in this build yet"
	}
	names := make([]string, 0, len(roles))
	for name, r := range roles {
		names = append(names, name+" ("+r.help+")")
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func runServe(ctx context.Context, f *serveFlags, log *slog.Logger) error {
	if len(f.kafka.brokers) == 0 {
		return usageError{fmt.Errorf("no Kafka brokers: pass --brokers host:port (or set CANON_BROKERS); for a single-process setup use 'canon dev'")}
	}
	var runs []role
	for _, name := range f.roles {
		r, ok := roles[name]
		if !ok {
			return usageError{fmt.Errorf("unknown role %q: known roles are %s", name, knownRoles())}
		}
		runs = append(runs, r)
	}
	n, err := newNode(ctx, log, f.kafka.brokers, &f.kafka, f.http)
	if err != nil {
		return err
	}
	log.Info("canon serve started", "version", versionString(), "roles", f.roles,
		"http", n.httpLn.Addr().String(), "partitions", n.topics.Partitions)
	components := make([]func(context.Context) error, 0, len(runs))
	for _, r := range runs {
		components = append(components, func(ctx context.Context) error { return r.run(ctx, n) })
	}
	return n.run(ctx, components...)
}
