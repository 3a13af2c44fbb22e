package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/projector/history"
)

// newMigrateCmd is `canon migrate`: the ClickHouse schema of the history
// tables, embedded in the binary.
func newMigrateCmd() *cobra.Command {
	f := &clickhouseFlags{}
	var list bool
	cmd := &cobra.Command{
		Use:   "migrate --clickhouse HOST:PORT",
		Short: "Create or update the ClickHouse history tables",
		Long: `Apply the schema migrations embedded in this binary to the ClickHouse database
of the history tables (--clickhouse-database, created if missing), in order,
and record each in its schema_migrations table. Running it again changes
nothing. The projector role applies them at start too; run this first where
the projector's user may not create tables.`,
		Example: `  canon migrate --clickhouse localhost:9000
  canon migrate --clickhouse localhost:9000 --list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if list {
				ms, err := history.Migrations()
				if err != nil {
					return err
				}
				for _, m := range ms {
					fmt.Fprintf(out, "%04d_%s  %d statements\n", m.Version, m.Name, len(m.Statements))
				}
				return nil
			}
			cfg, err := f.config()
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			conn, err := cfg.Open(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			res, err := history.Migrate(ctx, conn, cfg.Database)
			for _, r := range res {
				state := "already applied"
				if r.Applied {
					state = "applied"
				}
				fmt.Fprintf(out, "%04d_%s  %s\n", r.Version, r.Name, state)
				for _, c := range r.Kept {
					fmt.Fprintf(out, "  %s keeps its type: this ClickHouse alters no key column (times are still stored in UTC; see docs/analytics.md)\n", c)
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "database %s is up to date (%d migrations)\n", cfg.Database, len(res))
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&list, "list", false, "list the embedded migrations without connecting")
	return cmd
}
