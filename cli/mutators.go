package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
	"github.com/canon-sync/canon/wire"
)

// bundleFlags are the budgets of JavaScript mutators: every process that
// decides (dev, serve, replay, rebase) must run with the same ones, since
// a budget is part of what decides.
type bundleFlags struct {
	cpu, memory int64
}

func (b *bundleFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Int64Var(&b.cpu, "mutator-cpu-budget", bundle.DefaultCPUBudget,
		"JavaScript mutators: interpreter steps one mutation may take before it becomes an error (budget_exceeded); the same on every process that decides")
	f.Int64Var(&b.memory, "mutator-memory-budget", bundle.DefaultMemoryBudget,
		"JavaScript mutators: bytes of heap one mutation may allocate before it becomes an error (budget_exceeded); the same on every process that decides")
}

func (b *bundleFlags) options() (bundle.Options, error) {
	// Zero (a command without the flags) takes the defaults. A budget
	// under its minimum would refuse every bundle: refuse it at start.
	if b.cpu != 0 && b.cpu < bundle.MinCPUBudget {
		return bundle.Options{}, usageError{fmt.Errorf("--mutator-cpu-budget %d: give at least %d steps (default %d)", b.cpu, bundle.MinCPUBudget, bundle.DefaultCPUBudget)}
	}
	if b.memory != 0 && b.memory < bundle.MinMemoryBudget {
		return bundle.Options{}, usageError{fmt.Errorf("--mutator-memory-budget %d: give at least %d bytes (default %d)", b.memory, bundle.MinMemoryBudget, bundle.DefaultMemoryBudget)}
	}
	return bundle.Options{CPUBudget: b.cpu, MemoryBudget: b.memory}, nil
}

// newBundleCache compiles bundles with opts, once per hash.
func newBundleCache(opts bundle.Options) *model.BundleCache {
	return model.NewBundleCache(func(src []byte) (model.MutatorSet, error) {
		b, err := bundle.Compile(src, opts)
		if err != nil {
			return nil, err
		}
		return b, nil
	})
}

// checkBundle is the producer's check of a deploy: the bundle compiles
// with the budgets the sequencers run.
func checkBundle(opts bundle.Options) func([]byte) ([]string, error) {
	return func(src []byte) ([]string, error) {
		b, err := bundle.Compile(src, opts)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		return b.Names(), nil
	}
}

// readBundleFile reads a bundle to deploy: a .js bundle as it is, or a
// .ts/.tsx/.mts entry (or a .js entry with --build) bundled with what it
// imports.
func readBundleFile(path string, build bool) ([]byte, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if build || ext == ".ts" || ext == ".tsx" || ext == ".mts" {
		return bundle.Build(path)
	}
	return os.ReadFile(path)
}

type mutatorsFlags struct {
	url, token, org, project string
	build                    bool
	wait                     time.Duration
	out                      string
}

func (f *mutatorsFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.url, "url", "http://127.0.0.1:8080", "base URL of a Canon server with the producer (deploy) or readapi (get) role")
	fs.StringVar(&f.token, "token", "", "access token (better: CANON_TOKEN); deploy needs the admin scope")
	fs.StringVar(&f.org, "org", "", "the org (required)")
	fs.StringVar(&f.project, "project", "", "the project; without it, deploy deploys for every project of the org")
}

func newMutatorsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mutators",
		Short: "Deploy and inspect JavaScript mutator bundles",
		Long: `A mutator bundle is one JavaScript module whose default export maps mutator
names to functions (docs/mutators.md). Deploying it makes the sequencer
decide the project's (or the org's) mutations with it from the deploy's
position in the project's order on; each version records the bundle's hash.`,
	}
	cmd.AddCommand(newMutatorsDeployCmd(), newMutatorsGetCmd(), newMutatorsListCmd())
	return cmd
}

func newMutatorsDeployCmd() *cobra.Command {
	f := &mutatorsFlags{}
	cmd := &cobra.Command{
		Use:   "deploy --org ORG [--project P] FILE",
		Short: "Deploy a bundle (.js), or a .ts entry built into one",
		Long: `Compile FILE (a .ts entry is first bundled with what it imports), send it to
the server, which refuses a bundle that cannot run, and wait until the
sequencer has activated it (with --project; --wait 0 does not wait).`,
		Example: `  canon mutators deploy --org dev --project todo examples/todo/mutators.ts
  canon mutators deploy --url https://canon.example.com --org acme dist/mutators.js`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			src, err := readBundleFile(args[0], f.build)
			if err != nil {
				return err
			}
			return f.deploy(cmd.Context(), cmd.OutOrStdout(), src)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.build, "build", false, "bundle FILE with what it imports even when it is .js")
	cmd.Flags().DurationVar(&f.wait, "wait", 30*time.Second, "with --project: how long to wait for the activation (0: do not wait)")
	return cmd
}

// deploy sends the bundle src and, for a project, waits until the
// sequencer has activated it (f.wait).
func (f *mutatorsFlags) deploy(ctx context.Context, out io.Writer, src []byte) error {
	path := "/v1/orgs/" + url.PathEscape(f.org) + "/mutators"
	if f.project != "" {
		path = "/v1/projects/" + url.PathEscape(f.org) + "/" + url.PathEscape(f.project) + "/mutators"
	}
	var resp wire.DeployResponse
	if err := f.call(ctx, http.MethodPut, path, src, &resp); err != nil {
		return err
	}
	fmt.Fprintf(out, "deployed bundle %s (%d bytes) for %s: %s\n", resp.Hash, len(src), f.scope(), strings.Join(resp.Names, ", "))
	if f.project == "" || f.wait <= 0 {
		return nil
	}
	deadline := time.Now().Add(f.wait)
	for {
		var ab wire.ActiveBundle
		err := f.call(ctx, http.MethodGet, path, nil, &ab)
		if err == nil && ab.Hash == resp.Hash {
			fmt.Fprintf(out, "active in %s/%s from offset %d of partition %d\n", f.org, f.project, ab.Source.Offset, ab.Source.Partition)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bundle %s was written but is not active after %s (is a sequencer running? it rejects a bundle it cannot compile: see canon.rejected)", resp.Hash, f.wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newMutatorsGetCmd() *cobra.Command {
	f := &mutatorsFlags{}
	cmd := &cobra.Command{
		Use:   "get --org ORG --project P [--source FILE]",
		Short: "Show the bundle that decides a project's mutations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if f.project == "" {
				return usageError{errors.New("--project is required: the active bundle is per project (its own deploy, else its org's)")}
			}
			path := "/v1/projects/" + url.PathEscape(f.org) + "/" + url.PathEscape(f.project) + "/mutators"
			var ab wire.ActiveBundle
			if err := f.call(cmd.Context(), http.MethodGet, path, nil, &ab); err != nil {
				return err
			}
			if f.out != "" {
				var src []byte
				if err := f.call(cmd.Context(), http.MethodGet, path+"/bundle", nil, &src); err != nil {
					return err
				}
				if err := os.WriteFile(f.out, src, 0o644); err != nil {
					return err
				}
			}
			return printJSON(cmd.OutOrStdout(), ab)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.out, "source", "", "also write the bundle's source to this file")
	return cmd
}

func newMutatorsListCmd() *cobra.Command {
	f := &mutatorsFlags{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list --org ORG",
		Short: "List which scopes of an org have which bundle",
		Long: `List the org's deploy and its projects' own deploys, as the store of the
server asked holds them: a server that serves some partitions of the
changelog answers for those (the PARTITIONS column, and the first line,
say which).`,
		Example: `  canon mutators list --org dev`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if f.project != "" {
				return usageError{errors.New("list takes no --project: it lists the whole org (canon mutators get --project P shows one project's)")}
			}
			var ds wire.Deployments
			if err := f.call(cmd.Context(), http.MethodGet, "/v1/orgs/"+url.PathEscape(f.org)+"/mutators", nil, &ds); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, ds)
			}
			fmt.Fprintf(out, "org %s, partitions %s\n", ds.Org, partitionList(ds.Partitions))
			if len(ds.Deployments) == 0 {
				fmt.Fprintln(out, "no bundle deployed: the built-in and Go mutators decide")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCOPE\tHASH\tDEPLOYED\tBY\tPARTITIONS")
			for _, d := range ds.Deployments {
				scope := "org " + ds.Org
				if d.Scope == wire.ScopeProject {
					scope = ds.Org + "/" + d.Project
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", scope, d.Hash, time.UnixMilli(d.DeployedAt).UTC().Format(time.RFC3339),
					d.Principal, partitionList(d.Partitions))
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return cmd
}

func partitionList(ps []int32) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

func (f *mutatorsFlags) check() error {
	if f.org == "" {
		return usageError{errors.New("--org is required")}
	}
	if f.token == "" {
		f.token = os.Getenv("CANON_TOKEN")
	}
	if f.token == "" {
		return usageError{errors.New("no token: pass --token or set CANON_TOKEN (canon dev prints a dev token)")}
	}
	return nil
}

func (f *mutatorsFlags) scope() string {
	if f.project == "" {
		return "org " + f.org
	}
	return f.org + "/" + f.project
}

// call sends a request and decodes the answer into out (a *[]byte takes
// the body as it is); an error answer becomes its message and hint.
func (f *mutatorsFlags) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(f.url, "/")+path, bytes.NewReader(body))
	if err != nil {
		return usageError{fmt.Errorf("--url %q: %w", f.url, err)}
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/javascript")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var ea wire.ErrorAnswer
		if json.Unmarshal(b, &ea) == nil && ea.Error != nil {
			e := ea.Error
			msg := fmt.Sprintf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Code, e.Message)
			if e.Hint != "" {
				msg += ": " + e.Hint
			}
			return errors.New(msg)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	return json.Unmarshal(b, out)
}
