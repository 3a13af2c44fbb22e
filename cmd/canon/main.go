// Command canon is Canon's single binary: `canon dev` runs every role in one
// process for development, `canon serve --roles …` runs chosen roles in a
// cluster, and the other subcommands administer and inspect a deployment.
// The command itself lives in package cli, which programs that add their
// own Go mutators import.
package main

import (
	"os"

	"github.com/canon-sync/canon/cli"
)

func main() { os.Exit(cli.Main(cli.Options{})) }
