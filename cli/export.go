package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/pipelines"
)

type exportFlags struct {
	pipelineFlags
	branch    string
	at        uint64
	noHistory bool
	output    string
}

func newExportCmd(g *globalFlags) *cobra.Command {
	f := &exportFlags{}
	cmd := &cobra.Command{
		Use:   "export --brokers HOST:PORT --project ORG/P [--branch B] [--at V] [-o FILE]",
		Short: "Write a project's history and a snapshot as NDJSON",
		Long: `Write a project's history as NDJSON: a header line, then every version of
every branch in changelog order with its mutations and outcomes, each after
the bodies it refers to (item bodies and large arguments, by hash, once),
then the snapshot of --branch at --at (default main at its head): its
scalars and items. canon import and canon rebase --onto-snapshot read the
snapshot. docs/pipelines.md describes the lines.`,
		Example: `  canon export --brokers kafka:9092 --project acme/roadmap -o roadmap.ndjson
  canon export --brokers kafka:9092 --project acme/roadmap --branch feature --at 12 --no-history -o feature-12.ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, p, done, err := f.setup(cmd, g, "canon-export")
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			summary := cmd.ErrOrStderr()
			if f.output != "" && f.output != "-" {
				file, err := os.Create(f.output)
				if err != nil {
					return usageError{fmt.Errorf("-o: %w", err)}
				}
				defer func() {
					if cerr := file.Close(); err == nil {
						err = cerr
					}
				}()
				w, summary = file, cmd.OutOrStdout()
			}
			res, err := pipelines.Export(cmd.Context(), cfg, pipelines.ExportOptions{Project: p, Branch: f.branch, At: f.at, NoHistory: f.noHistory}, w)
			done()
			if err != nil {
				return pipelineError(err)
			}
			if f.json {
				return printJSON(summary, res)
			}
			fmt.Fprintf(summary, "exported %s: %d versions, %d bodies, snapshot %s with %d items, %d bytes\n",
				res.Project, res.Versions, res.Bodies, res.Snapshot, res.Items, res.Bytes)
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.branch, "branch", "main", "the branch of the snapshot")
	fs.Uint64Var(&f.at, "at", 0, "the version of the snapshot (default the head)")
	fs.BoolVar(&f.noHistory, "no-history", false, "write the snapshot only")
	fs.StringVarP(&f.output, "output", "o", "", "the file to write (default stdout; the summary then goes to stderr)")
	return cmd
}
