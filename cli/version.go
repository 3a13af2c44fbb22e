package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at build time by the Makefile
// (-ldflags "-X github.com/canon-sync/canon/cli.version=…", and .commit).
var (
	version = "dev"
	commit  = ""
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print Canon's version and build information",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "canon %s\n", versionString())
			fmt.Fprintf(cmd.OutOrStdout(), "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, dep := range bi.Deps {
					switch dep.Path {
					case "github.com/twmb/franz-go", "github.com/cockroachdb/pebble/v2", "github.com/ClickHouse/clickhouse-go/v2":
						fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", dep.Path, dep.Version)
					}
				}
			}
		},
	}
}

func versionString() string {
	v := version
	if commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					commit = s.Value[:12]
				}
			}
		}
	}
	if commit != "" {
		v += " (" + commit + ")"
	}
	return v
}
