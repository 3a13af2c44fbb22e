package canontest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Poll bounds the interval between two evaluations of a Wait condition.
// Wait starts faster and backs off to it, so that a condition that holds
// soon is seen soon and a long wait does not spin.
const Poll = 25 * time.Millisecond

// pending is a condition's report that it does not hold yet.
type pending struct{ state string }

func (p *pending) Error() string { return p.state }

// Pending is what a Wait condition returns when it does not hold yet and
// can say where things stand; Wait names the last such state when it
// times out.
func Pending(format string, args ...any) error {
	return &pending{state: fmt.Sprintf(format, args...)}
}

// Wait evaluates cond until it holds and fails the test when ctx ends
// first, saying what was awaited. cond returns true when it holds; a
// Pending error when it does not yet; any other error fails the test at
// once. It is the only way Canon's tests wait: never a bare sleep.
func Wait(tb testing.TB, ctx context.Context, what string, cond func() (bool, error)) {
	tb.Helper()
	start := time.Now()
	interval := time.Millisecond
	var state string
	for {
		ok, err := cond()
		if p := (*pending)(nil); errors.As(err, &p) {
			state, err = p.state, nil
		}
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			if state != "" {
				tb.Fatalf("timed out after %v waiting for %s: still %s", time.Since(start).Round(time.Millisecond), what, state)
			}
			tb.Fatalf("timed out after %v waiting for %s", time.Since(start).Round(time.Millisecond), what)
		case <-time.After(interval):
		}
		interval = min(2*interval, Poll)
	}
}

// Context is a context of the test that ends after d or with the test.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// WaitFor is Wait with a deadline of d from now.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, error)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	Wait(tb, ctx, what, cond)
}
