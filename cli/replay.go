package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/pipelines"
)

type replayFlags struct {
	pipelineFlags
	branch               string
	from, to             uint64
	into                 string
	inMemory             bool
	fromOffset, toOffset int64
	since, until         string
	client               string
}

func newReplayCmd(g *globalFlags) *cobra.Command {
	f := &replayFlags{}
	cmd := &cobra.Command{
		Use:   "replay --brokers HOST:PORT --project ORG/P --branch B [--from V1] [--to V2] --into NEW",
		Short: "Re-run a branch's mutations onto a new branch and check that they are deterministic",
		Long: `Re-run the canonical mutations of a branch, in their applied order as
canon.versions holds them, onto a new branch made from the same base (the
branch at version --from minus 1), and check that after every version the
replayed state hash is the original's; the first divergence is reported with
its version, mutation and item, and the command exits with status 1.

A replay from version 1 of main starts from the empty state: give --into
ORG/PROJECT, a new project. With --in-memory nothing is produced: the
mutations are decided in this process with the mutators this binary was built
with (the built-ins, and a program's own Go mutators: see package cli) and,
for a version decided by a deployed JavaScript bundle, with the bundle that
version recorded (from the changelog).

With --from-offset, --to-offset, --since or --until the mutations are read
from canon.mutations instead: the branch's records in that range of the
project's partition, with their own arguments and timestamps. Records that
made no version (duplicates, gaps, rejections) are counted and skipped.

A replay that is interrupted can be run again: what the target already
holds is not sent twice.`,
		Example: `  canon replay --brokers kafka:9092 --project acme/roadmap --branch main --from 120 --into replay-120
  canon replay --brokers kafka:9092 --project acme/roadmap --into acme/roadmap-replay --json
  canon replay --brokers kafka:9092 --project acme/roadmap --in-memory --since 2026-11-01T00:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, p, done, err := f.setup(cmd, g, "canon-replay")
			if err != nil {
				return err
			}
			opt := pipelines.ReplayOptions{
				Source: pipelines.BranchRef{ProjectRef: p, Branch: f.branch},
				From:   f.from, To: f.to, Into: f.into, InMemory: f.inMemory, Client: f.client,
			}
			if opt.Raw, err = f.rawRange(cmd); err != nil {
				return err
			}
			if opt.Raw != nil && (f.from != 0 || f.to != 0) {
				return usageError{errors.New("--from and --to are versions; with a raw range give --from-offset/--to-offset or --since/--until only")}
			}
			if !f.inMemory && f.into == "" {
				return usageError{errors.New("--into is required: a new branch name, or ORG/PROJECT for a new project (or --in-memory)")}
			}
			res, err := pipelines.Replay(cmd.Context(), cfg, opt)
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
				where := "through the sequencer"
				if res.InMemory {
					where = "in memory"
				}
				fmt.Fprintf(out, "replay of %s versions %d-%d into %s, %s:\n", res.Source, res.From, res.To, res.Target, where)
				if res.FromOffset != nil {
					fmt.Fprintf(out, "  raw range   offsets [%d, %d), %d records made no version and were skipped\n", *res.FromOffset, *res.ToOffset, res.Skipped)
				}
				printCounts(out, res.Counts)
				fmt.Fprintf(out, "  checked     %d versions in %s\n", res.Checked, (time.Duration(res.ElapsedMS) * time.Millisecond).String())
				if res.Deterministic {
					fmt.Fprintln(out, "  deterministic: every replayed state hash is the original's")
				} else {
					printDivergence(out, res.Divergence)
				}
			}
			if !res.Deterministic {
				d := res.Divergence
				return fmt.Errorf("not deterministic: first divergence at version %d (mutation %d of client %s, %s)", d.Version, d.Mutation.ID, d.Mutation.Client, d.Mutation.Name)
			}
			return nil
		},
	}
	f.register(cmd)
	f.bundles.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.branch, "branch", "main", "the branch to replay")
	fs.Uint64Var(&f.from, "from", 0, "first version to replay (default 1)")
	fs.Uint64Var(&f.to, "to", 0, "last version to replay (default the head)")
	fs.StringVar(&f.into, "into", "", "the new branch, or ORG/PROJECT: the main branch of a new project")
	fs.BoolVar(&f.inMemory, "in-memory", false, "decide in this process and produce nothing")
	fs.Int64Var(&f.fromOffset, "from-offset", -1, "replay from canon.mutations, from this offset of the project's partition")
	fs.Int64Var(&f.toOffset, "to-offset", -1, "replay from canon.mutations, up to this offset (exclusive)")
	fs.StringVar(&f.since, "since", "", "replay from canon.mutations, records from this time (RFC 3339)")
	fs.StringVar(&f.until, "until", "", "replay from canon.mutations, records before this time (RFC 3339)")
	fs.StringVar(&f.client, "client", pipelines.ReplayClient, "client of the replay's own branch.create on the target")
	return cmd
}

func (f *replayFlags) rawRange(cmd *cobra.Command) (*pipelines.RawRange, error) {
	fs := cmd.Flags()
	if !fs.Changed("from-offset") && !fs.Changed("to-offset") && f.since == "" && f.until == "" {
		return nil, nil
	}
	r := &pipelines.RawRange{FromOffset: f.fromOffset, ToOffset: f.toOffset}
	for _, t := range []struct {
		flag, v string
		dst     *time.Time
	}{{"--since", f.since, &r.Since}, {"--until", f.until, &r.Until}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return nil, usageError{fmt.Errorf("%s %q: write a time as RFC 3339, e.g. 2026-11-01T09:30:00Z", t.flag, t.v)}
		}
		*t.dst = at
	}
	return r, nil
}

func printDivergence(w io.Writer, d *pipelines.Divergence) {
	fmt.Fprintf(w, "  NOT deterministic: first divergence at version %d (replay version %d)\n", d.Version, d.TargetVersion)
	fmt.Fprintf(w, "    mutation  %d of client %s (%s), id %d on the target\n", d.Mutation.ID, d.Mutation.Client, d.Mutation.Name, d.Mutation.TargetID)
	fmt.Fprintf(w, "    outcome   %s, replayed %s\n", d.Status, d.ReplayedStatus)
	if d.Error != "" || d.ReplayedError != "" {
		fmt.Fprintf(w, "    error     %q, replayed %q\n", d.Error, d.ReplayedError)
	}
	if d.StateHash != "" {
		fmt.Fprintf(w, "    state     %s, replayed %s\n", shortHash(d.StateHash), shortHash(d.ReplayedStateHash))
	}
	switch {
	case d.Item != nil:
		fmt.Fprintf(w, "    item      %s/%s %s (hash %s, replayed %s)\n", d.Item.Collection, d.Item.ID, d.Item.Change, shortHash(d.Item.SourceHash), shortHash(d.Item.TargetHash))
	case d.Scalars:
		fmt.Fprintln(w, "    scalars   differ")
	}
}
