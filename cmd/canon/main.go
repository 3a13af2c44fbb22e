// Command canon is Canon's single binary: `canon dev` runs every role in one
// process for development, `canon serve --roles …` runs chosen roles in a
// cluster, and the other subcommands administer and inspect a deployment.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		var uerr usageError
		if errors.As(err, &uerr) {
			fmt.Fprintf(os.Stderr, "canon: %v\nRun 'canon --help' for usage.\n", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "canon: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a mistake in the command line, reported with a hint to
// --help and exit code 2.
type usageError struct{ error }
