package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// globalFlags are the flags every subcommand has, and the Options of the
// program built on Canon.
type globalFlags struct {
	logLevel      string
	kafkaLogLevel string
	logFormat     string
	opts          Options
}

func newRootCmd(opts Options) *cobra.Command {
	g := &globalFlags{opts: opts}
	root := &cobra.Command{
		Use:   "canon",
		Short: "Canon: a sync backend for collaborative, versioned documents",
		Long: `Canon orders the mutations that clients push for a project, applies them with
server-side mutation logic, and publishes every resulting version: over
websockets to clients, to ClickHouse for analysts, and as a Kafka changelog
that data teams can replay.

Every flag can also be set with an environment variable: CANON_ and the flag
name in capitals with dashes as underscores (--http is CANON_HTTP). A flag on
the command line wins over the environment.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd)
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.kafkaLogLevel, "kafka-log-level", "warn",
		"log level of the Kafka client library (franz-go) and of the embedded broker: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDevCmd(g), newServeCmd(g), newTopicsCmd(g), newTokenCmd(), newHealthCmd(), newVersionCmd(),
		newMigrateCmd(), newProjectorCmd(g), newReplayCmd(g), newRebaseCmd(g), newExportCmd(g), newImportCmd(g),
		newMutatorsCmd())
	return root
}

// logger builds the process logger from the global flags.
func (g *globalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level, kafkaLevel slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", g.logLevel)}
	}
	if err := kafkaLevel.UnmarshalText([]byte(g.kafkaLogLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--kafka-log-level %q: use debug, info, warn or error", g.kafkaLogLevel)}
	}
	opts := &slog.HandlerOptions{Level: min(level, kafkaLevel)}
	var h slog.Handler
	switch g.logFormat {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: use text or json", g.logFormat)}
	}
	return slog.New(&componentLevels{h: h, canon: level, kafka: kafkaLevel}), nil
}

// kafkaComponents are the "component" values of the loggers handed to
// the Kafka client library (internal/kafka's ClientConfig) and to the
// embedded broker.
var kafkaComponents = map[string]bool{"franz-go": true, "kfake": true}

// componentLevels gives the Kafka library's records a level of their own
// (--kafka-log-level): at info, franz-go logs six lines per transaction and
// more per join, which made nine lines in ten of a dev log and buried
// Canon's own. A logger whose attributes name a Kafka component gets the
// Kafka level; every other one Canon's.
type componentLevels struct {
	h            slog.Handler
	canon, kafka slog.Level
	isKafka      bool
}

func (c *componentLevels) Enabled(ctx context.Context, l slog.Level) bool {
	if c.isKafka {
		return l >= c.kafka && c.h.Enabled(ctx, l)
	}
	return l >= c.canon && c.h.Enabled(ctx, l)
}

func (c *componentLevels) Handle(ctx context.Context, r slog.Record) error { return c.h.Handle(ctx, r) }

func (c *componentLevels) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *c
	n.h = c.h.WithAttrs(attrs)
	for _, a := range attrs {
		if a.Key == "component" && kafkaComponents[a.Value.String()] {
			n.isKafka = true
		}
	}
	return &n
}

func (c *componentLevels) WithGroup(name string) slog.Handler {
	n := *c
	n.h = c.h.WithGroup(name)
	return &n
}

// envName is the environment variable that sets a flag.
func envName(flag string) string {
	return "CANON_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set.
func applyEnv(cmd *cobra.Command) error {
	var err error
	set := func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = usageError{fmt.Errorf("%s=%q: %w", envName(f.Name), v, serr)}
			return
		}
		f.Changed = true
	}
	cmd.Flags().VisitAll(set)
	cmd.InheritedFlags().VisitAll(set)
	return err
}
