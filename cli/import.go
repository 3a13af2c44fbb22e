package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/pipelines"
)

type importFlags struct {
	pipelineFlags
	branch string
	from   string
	dryRun bool
	client string
}

func newImportCmd(g *globalFlags) *cobra.Command {
	f := &importFlags{}
	cmd := &cobra.Command{
		Use:   "import FILE --brokers HOST:PORT --project ORG/P [--branch NEW [--from BRANCH@VERSION]]",
		Short: "Import the snapshot of an export file as a new project or branch",
		Long: `Import the snapshot of a canon export file. Without --branch (or with
--branch main) it becomes the main branch of a new project: a project.set of
its scalars and an item.put of each item. With --branch NEW it becomes a new
branch of an existing project, made with branch.create from --from (default
main at its head) and turned into the snapshot's state by as few mutations
as the difference needs.

The command waits until the sequencer has decided every mutation and checks
that the target's state hash is the snapshot's. An interrupted import can be
run again with the same flags.`,
		Example: `  canon import roadmap.ndjson --brokers kafka:9092 --project acme/roadmap-copy
  canon import feature-12.ndjson --brokers kafka:9092 --project acme/roadmap --branch restored --from main@40`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, p, done, err := f.setup(cmd, g, "canon-import")
			if err != nil {
				return err
			}
			snap, err := readSnapshotFile(args[0])
			if err != nil {
				return err
			}
			opt := pipelines.ImportOptions{Snapshot: snap, Target: pipelines.BranchRef{ProjectRef: p, Branch: f.branch}, DryRun: f.dryRun, Client: f.client}
			if f.from != "" {
				b, err := pipelines.ParseBranchAt(f.from)
				if err != nil {
					return usageError{fmt.Errorf("--from %w", err)}
				}
				opt.From = &b
			}
			res, err := pipelines.Import(cmd.Context(), cfg, opt)
			done()
			if err != nil {
				return pipelineError(err)
			}
			out := cmd.OutOrStdout()
			if f.json {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else {
				what := "imported"
				if res.DryRun {
					what = "dry run (nothing produced): would import"
				}
				fmt.Fprintf(out, "%s %s@%d into %s", what, snap.Branch, snap.Version, res.Target)
				if res.From != "" {
					fmt.Fprintf(out, " (from %s)", res.From)
				}
				fmt.Fprintln(out, ":")
				printCounts(out, res.Counts)
				fmt.Fprintf(out, "  head        version %d, state %s, snapshot %s\n", res.TargetHead, shortHash(res.TargetStateHash), shortHash(res.SnapshotStateHash))
			}
			if !res.Matches {
				return fmt.Errorf("%s has state %s, not the snapshot's %s", res.Target, res.TargetStateHash, res.SnapshotStateHash)
			}
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.branch, "branch", "main", "the target branch: main of a new project, or a new branch")
	fs.StringVar(&f.from, "from", "", "for a new branch: the branch (and @version) it is made from (default main)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide in memory and produce nothing")
	fs.StringVar(&f.client, "client", pipelines.ImportClient, "client of the import's mutations")
	return cmd
}
