// Command run starts a real Kafka broker and a real ClickHouse server once,
// runs a command (the test suite) with their addresses in the environment,
// and stops both afterwards, also when the command fails or the run is
// interrupted. When the command fails it prints the tails of the servers'
// logs.
//
//	go run ./internal/testenv/run -- go test -race ./...
//
// See package testenv for how the servers are found or started.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

func main() { os.Exit(run()) }

func run() int {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: run -- COMMAND [ARGS…]")
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	startc := make(chan error, 1)
	var shared *testenv.Shared
	go func() {
		var err error
		shared, err = testenv.StartShared(ctx)
		startc <- err
	}()
	select {
	case err := <-startc:
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: cannot start the test servers:\n%v\n", err)
			return 1
		}
	case sig := <-sigs:
		cancel()
		if err := <-startc; err == nil {
			shared.Stop()
		}
		fmt.Fprintf(os.Stderr, "testenv: interrupted by %v while starting servers\n", sig)
		return 130
	}
	defer shared.Stop()
	fmt.Fprint(os.Stderr, shared.Summary())

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), shared.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case sig := <-sigs:
			// Pass Ctrl-C on; the test binary cleans up and exits, then we
			// stop the servers.
			_ = cmd.Process.Signal(sig)
		}
	}
	code := 0
	if err != nil {
		code = 1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "\ntestenv: %s failed (%v)\n%s", args[0], err, shared.Tails(40))
	}
	return code
}
