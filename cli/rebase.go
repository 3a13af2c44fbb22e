package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/pipelines"
)

type rebaseFlags struct {
	pipelineFlags
	mutators     string
	branch       string
	onto         string
	ontoSnapshot string
	from, to     uint64
	into         string
	dryRun       bool
	client       string
}

func newRebaseCmd(g *globalFlags) *cobra.Command {
	f := &rebaseFlags{}
	cmd := &cobra.Command{
		Use:   "rebase --brokers HOST:PORT --project ORG/P --branch B --onto BRANCH@VERSION|--onto-snapshot FILE --from V1 [--to V2] --into NEW",
		Short: "Re-apply a branch's mutations onto another base as a new branch",
		Long: `Create NEW from the base with branch.create, send it the mutations of
versions --from to --to of the branch (default its head) in canonical order,
keeping their clients and the order of their ids, wait until the sequencer
has decided them, and print a summary: versions made, the mutations whose
outcome differs from the original (the conflicts: applied before and an
error now, or the reverse), and the item-level difference between NEW's head
and the branch at --to.

--onto-snapshot FILE (a canon export file) makes NEW from the branch at
--from minus 1 and turns it into the snapshot's state first.

--dry-run decides everything in memory and produces nothing. An interrupted
rebase can be run again with the same flags: the target gets each mutation
once.`,
		Example: `  canon rebase --brokers kafka:9092 --project acme/roadmap --branch feature --from 2 --onto main@40 --into feature-on-40
  canon rebase --brokers kafka:9092 --project acme/roadmap --branch feature --from 2 --onto main --into feature-next --dry-run --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, p, done, err := f.setup(cmd, g, "canon-rebase")
			if err != nil {
				return err
			}
			if (f.onto == "") == (f.ontoSnapshot == "") {
				return usageError{errors.New("give exactly one of --onto BRANCH@VERSION and --onto-snapshot FILE")}
			}
			if f.from == 0 {
				return usageError{errors.New("--from is required: the first version of --branch to rebase")}
			}
			if f.into == "" {
				return usageError{errors.New("--into is required: the new branch's name")}
			}
			opt := pipelines.RebaseOptions{
				Source: pipelines.BranchRef{ProjectRef: p, Branch: f.branch},
				From:   f.from, To: f.to, Into: f.into, DryRun: f.dryRun, Client: f.client,
			}
			if f.onto != "" {
				b, err := pipelines.ParseBranchAt(f.onto)
				if err != nil {
					return usageError{fmt.Errorf("--onto %w", err)}
				}
				opt.Onto = &b
			} else {
				snap, err := readSnapshotFile(f.ontoSnapshot)
				if err != nil {
					return err
				}
				opt.OntoSnapshot, opt.OntoName = snap, f.ontoSnapshot
			}
			if f.mutators != "" {
				if !f.dryRun {
					return usageError{errors.New("--mutators needs --dry-run: the sequencers decide with the project's deployed bundle (deploy it with canon mutators deploy to rebase through them)")}
				}
				src, err := readBundleFile(f.mutators, false)
				if err != nil {
					return err
				}
				if cfg.Mutators, err = cfg.Bundles.Compile(src); err != nil {
					return usageError{fmt.Errorf("--mutators %s: %w", f.mutators, err)}
				}
			}
			res, err := pipelines.Rebase(cmd.Context(), cfg, opt)
			done()
			if err != nil {
				return pipelineError(err)
			}
			out := cmd.OutOrStdout()
			if f.json {
				return printJSON(out, res)
			}
			what := "rebase"
			if res.DryRun {
				what = "dry run of the rebase (nothing produced)"
			}
			fmt.Fprintf(out, "%s of %s versions %d-%d onto %s into %s:\n", what, res.Source, res.From, res.To, res.Onto, res.Target)
			printCounts(out, res.Counts)
			fmt.Fprintf(out, "  head        %s at version %d, state %s (source %s)\n", res.Target, res.TargetHead, shortHash(res.TargetStateHash), shortHash(res.SourceStateHash))
			fmt.Fprintf(out, "  conflicts   %d\n", len(res.Conflicts))
			for i, c := range res.Conflicts {
				if i == maxListed {
					fmt.Fprintf(out, "    … and %d more (--json lists them all)\n", len(res.Conflicts)-maxListed)
					break
				}
				fmt.Fprintf(out, "    version %d: mutation %d of client %s (%s): %s, now %s", c.Version, c.Mutation.ID, c.Mutation.Client, c.Mutation.Name, c.Status, c.NewStatus)
				if c.NewError != "" {
					fmt.Fprintf(out, ": %s", c.NewError)
				}
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "  difference between %s at version %d and %s:\n", res.Source, res.To, res.Target)
			printDiff(out, res.Diff, "source", "target")
			fmt.Fprintf(out, "  took        %s\n", time.Duration(res.ElapsedMS)*time.Millisecond)
			return nil
		},
	}
	f.register(cmd)
	f.bundles.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.mutators, "mutators", "", "decide every mutation with this bundle (.js, or a .ts entry) instead of the ones their versions recorded: what if the history had run under new logic (with --dry-run)")
	fs.StringVar(&f.branch, "branch", "main", "the branch whose mutations are rebased")
	fs.StringVar(&f.onto, "onto", "", "the new base: BRANCH@VERSION, or BRANCH for its head")
	fs.StringVar(&f.ontoSnapshot, "onto-snapshot", "", "the new base: the snapshot of a canon export file")
	fs.Uint64Var(&f.from, "from", 0, "first version of --branch to rebase (required)")
	fs.Uint64Var(&f.to, "to", 0, "last version of --branch to rebase (default its head)")
	fs.StringVar(&f.into, "into", "", "the new branch (required)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide in memory and produce nothing")
	fs.StringVar(&f.client, "client", pipelines.RebaseClient, "client of the rebase's own mutations on the target")
	return cmd
}

// maxListed is how many conflicts or differing items a text summary
// lists.
const maxListed = 20

// readSnapshotFile reads the snapshot of a canon export file.
func readSnapshotFile(path string) (*pipelines.Snapshot, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("snapshot file: %w", err)}
	}
	defer file.Close()
	snap, err := pipelines.ReadSnapshot(file)
	if err != nil {
		return nil, fmt.Errorf("snapshot file %s: %w", path, pipelineError(err))
	}
	return snap, nil
}
