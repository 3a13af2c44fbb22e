// Package cli is Canon's command line as a library: cmd/canon is a main
// that calls Main, and a Go program that imports this package and hands
// Main its own mutators gets the whole canon command (dev, serve
// --roles …, replay, rebase, …) deciding with them, as a Temporal worker
// or a goka processor is built around its application's code.
//
//	func main() {
//		os.Exit(cli.Main(cli.Options{Mutators: func(r *model.Registry) error {
//			return r.Register("todo.toggle", toggle)
//		}}))
//	}
//
// Every process of a deployment must be built with the same mutators:
// the sequencers decide with them, and replay and rebase must decide
// identically.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/model"
)

// Options are what a program built on Canon adds to it.
type Options struct {
	// Mutators registers the application's Go mutators on a registry that
	// already holds the built-ins (model.NewRegistry). It is called once
	// per registry Canon builds: by the sequencer role, and by replay and
	// rebase for their in-memory decisions.
	Mutators func(*model.Registry) error
	// Stdout and Stderr default to the process's.
	Stdout, Stderr io.Writer
}

// registry returns the built-ins plus the application's mutators.
func (o Options) registry() (*model.Registry, error) {
	r := model.NewRegistry()
	if o.Mutators == nil {
		return r, nil
	}
	if err := o.Mutators(r); err != nil {
		return nil, fmt.Errorf("register the application's mutators: %w", err)
	}
	return r, nil
}

// Main runs the canon command with the process's arguments until it is
// done or the process is interrupted (SIGINT, SIGTERM), and returns the
// exit code: 0, 1 on an error, 2 on a mistake in the command line.
func Main(opts Options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, opts, os.Args[1:])
}

func run(ctx context.Context, opts Options, args []string) int {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	root := Command(opts)
	root.SetArgs(args)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var uerr usageError
	if errors.As(err, &uerr) {
		fmt.Fprintf(opts.Stderr, "canon: %v\nRun 'canon --help' for usage.\n", err)
		return 2
	}
	fmt.Fprintf(opts.Stderr, "canon: %v\n", err)
	return 1
}

// Command returns the canon command, for a program that composes it
// into a command tree of its own.
func Command(opts Options) *cobra.Command {
	return newRootCmd(opts)
}

// usageError is a mistake in the command line, reported with a hint to
// --help and exit code 2.
type usageError struct{ error }
