package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/pipelines"
)

// pipelineFlags are the flags the pipeline commands (replay, rebase,
// export, import) share.
type pipelineFlags struct {
	brokers     []string
	topicPrefix string
	project     string
	json        bool
	idleTimeout time.Duration
	principal   string
	security    kafka.SecurityConfig
	// bundles are registered by the jobs that decide (replay, rebase).
	bundles bundleFlags
}

func (f *pipelineFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.brokers, "brokers", nil, "Kafka brokers, host:port, comma separated (required)")
	fs.StringVar(&f.topicPrefix, "topic-prefix", "", "prefix of Canon's topic names, as given to canon serve")
	registerKafkaSecurity(cmd, &f.security)
	fs.StringVar(&f.project, "project", "", "the project, ORG/PROJECT (required)")
	fs.BoolVar(&f.json, "json", false, "print the result as one JSON object on stdout, and no progress bar")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", pipelines.DefaultIdleTimeout,
		"give up when the sequencer decides nothing of what the job produced for this long (run the job again to resume)")
	fs.StringVar(&f.principal, "principal", "",
		"who runs the job, recorded with every mutation it sends (default os:<your user name>)")
}

// setup checks the shared flags and returns the job's config, the project
// and a function that ends the progress bar.
func (f *pipelineFlags) setup(cmd *cobra.Command, g *globalFlags, clientID string) (pipelines.Config, pipelines.ProjectRef, func(), error) {
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, err
	}
	if len(f.brokers) == 0 {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, usageError{fmt.Errorf("no Kafka brokers: pass --brokers host:port (or set CANON_BROKERS)")}
	}
	if f.project == "" {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, usageError{fmt.Errorf("--project is required: ORG/PROJECT")}
	}
	p, err := pipelines.ParseProject(f.project)
	if err != nil {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, usageError{fmt.Errorf("--project: %w", err)}
	}
	if f.idleTimeout <= 0 {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, usageError{fmt.Errorf("--idle-timeout %s: give a positive duration", f.idleTimeout)}
	}
	principal := f.principal
	if principal == "" {
		if u, err := user.Current(); err == nil {
			principal = "os:" + u.Username
		}
	}
	kcfg, err := securedClientConfig(f.brokers, &f.security, clientID, nil)
	if err != nil {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, err
	}
	mutators, err := g.opts.registry()
	if err != nil {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, err
	}
	bopts, err := f.bundles.options()
	if err != nil {
		return pipelines.Config{}, pipelines.ProjectRef{}, nil, err
	}
	cfg := pipelines.Config{
		Registry:    mutators,
		Bundles:     newBundleCache(bopts),
		Kafka:       kcfg,
		Topics:      kafka.DefaultTopicNames().WithPrefix(f.topicPrefix),
		IdleTimeout: f.idleTimeout,
		Log:         log,
		Principal:   principal,
	}
	bars := newProgressBars(cmd.ErrOrStderr(), f.json)
	cfg.Progress = bars.report
	return cfg, p, bars.finish, nil
}

// progressBars shows one bar per phase of a job, with its rate and ETA,
// on a terminal only.
type progressBars struct {
	w     io.Writer
	on    bool
	phase string
	bar   *progressbar.ProgressBar
}

func newProgressBars(w io.Writer, quiet bool) *progressBars {
	file, ok := w.(*os.File)
	return &progressBars{w: w, on: ok && !quiet && term.IsTerminal(int(file.Fd()))}
}

var phaseText = map[string]string{
	"read":    "read history",
	"decide":  "decide in memory",
	"produce": "produce",
	"wait":    "wait for outcomes",
	"export":  "export",
}

func (b *progressBars) report(p pipelines.Progress) {
	if !b.on {
		return
	}
	if p.Phase != b.phase || b.bar == nil {
		b.finish()
		b.phase = p.Phase
		unit := "mutations"
		switch p.Phase {
		case "read":
			unit = "records"
		case "export":
			unit = "versions"
		}
		b.bar = progressbar.NewOptions64(max(p.Total, 1),
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(phaseText[p.Phase]),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	if p.Total > 0 && b.bar.GetMax64() != p.Total {
		b.bar.ChangeMax64(p.Total)
	}
	_ = b.bar.Set64(p.Done)
}

func (b *progressBars) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
		b.bar = nil
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printCounts writes what a job made on its target.
func printCounts(w io.Writer, c pipelines.Counts) {
	fmt.Fprintf(w, "  mutations   %d (%d were on the target already)\n", c.Mutations, c.AlreadyOnTarget)
	fmt.Fprintf(w, "  versions    %d (%d applied, %d errors, %d not recorded)\n", c.Versions, c.Applied, c.Errors, c.Rejected)
}

// printDiff writes an item-level difference.
func printDiff(w io.Writer, d pipelines.StateDiff, source, target string) {
	if len(d.Scalars) == 0 && len(d.Items) == 0 {
		fmt.Fprintf(w, "  no difference between %s and %s\n", source, target)
		return
	}
	for _, s := range d.Scalars {
		fmt.Fprintf(w, "  scalar %-20s %s: %s, %s: %s\n", s.Name, source, orAbsent(s.Source), target, orAbsent(s.Target))
	}
	for i, it := range d.Items {
		if i == maxListed {
			fmt.Fprintf(w, "  … and %d more items (--json lists them all)\n", len(d.Items)-maxListed)
			break
		}
		fmt.Fprintf(w, "  %-14s %s/%s\n", it.Change, it.Collection, it.ID)
	}
}

func orAbsent(b []byte) string {
	if len(b) == 0 {
		return "absent"
	}
	return string(b)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// pipelineFlagNames are the flags of the pipelines commands by the job option
// they set, as pipelines.OptionError names the options.
var pipelineFlagNames = map[string]string{
	"Into": "--into", "From": "--from", "To": "--to", "Onto": "--onto", "OntoSnapshot": "--onto-snapshot",
	"Client": "--client", "At": "--at", "Project": "--project", "Branch": "--branch",
	"Source.Project": "--project", "Source.Branch": "--branch", "Target.Branch": "--branch",
	"Config.Topics":  "--topic-prefix",
	"Raw.FromOffset": "--from-offset", "Raw.ToOffset": "--to-offset", "Raw.Since": "--since", "Raw.Until": "--until",
}

// pipelineError is err of a pipelines job as canon's users read it: the
// options an OptionError names are the flags that set them.
func pipelineError(err error) error {
	var oe *pipelines.OptionError
	switch {
	case errors.As(err, &oe):
		msg := oe.Explain(func(option string) string { return pipelineFlagNames[option] })
		return explainedError{strings.Replace(err.Error(), oe.Error(), msg, 1), err}
	case errors.Is(err, pipelines.ErrNoSnapshot):
		msg := "the file holds no snapshot: export one with canon export (a history export ends with the snapshot of --branch)"
		return explainedError{strings.Replace(err.Error(), pipelines.ErrNoSnapshot.Error(), msg, 1), err}
	}
	return err
}

// explainedError is an error of a library with its message told in the
// command's terms; errors.Is and As see the library's error.
type explainedError struct {
	msg string
	err error
}

func (e explainedError) Error() string { return e.msg }
func (e explainedError) Unwrap() error { return e.err }
