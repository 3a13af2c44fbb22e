package pipelines

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A rebase interrupted while it produces, run again: the target holds
// each mutation once and the state a dry run predicted.
func TestRebaseInterruptedAndRunAgain(t *testing.T) {
	const n = 1500
	ctx := testCtx(t)
	e := newEnv(t, nil)
	p := ProjectRef{"acme", "resume"}
	ms := []mut{
		{"", "a", 1, "item.put", `{"collection":"docs","id":"d","data":{"text":"base"}}`},
		{"work", "a", 1, "branch.create", `{"from":"main"}`},
	}
	ids := map[string]uint64{}
	for i := 1; i <= n; i++ {
		c := fmt.Sprintf("w%d", i%3)
		ids[c]++
		ms = append(ms, mut{"work", c, ids[c], "item.put", fmt.Sprintf(`{"collection":"docs","id":"d%d","data":{"i":%d}}`, i%50, i)})
	}
	ms = append(ms, mut{"", "a", 2, "item.put", `{"collection":"docs","id":"d7","data":{"on":"main"}}`})
	e.push(t, ctx, p, ms...)
	e.waitHead(t, ctx, BranchRef{p, "work"}, n+1)
	e.waitHead(t, ctx, BranchRef{p, "main"}, 2)

	opt := RebaseOptions{Source: BranchRef{p, "work"}, From: 2, Onto: &BranchAt{Branch: "main"}, Into: "work-rebased"}
	dry := opt
	dry.DryRun = true
	want, err := Rebase(ctx, e.cfg, dry)
	if err != nil {
		t.Fatal(err)
	}

	before := e.mutationsEnd(t, ctx)
	kctx, kill := context.WithCancel(ctx)
	cfg := e.cfg
	cfg.Progress = func(pr Progress) {
		if pr.Phase == "produce" && pr.Done >= n/2 {
			kill()
		}
	}
	if _, err := Rebase(kctx, cfg, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebase: %v, want context.Canceled", err)
	}
	written := e.mutationsEnd(t, ctx) - before
	t.Logf("the interrupted run wrote %d of %d records", written, n+1)
	if written < n/2 || written >= n+1 {
		t.Fatalf("the interrupted run wrote %d records: it was not interrupted in the middle", written)
	}
	target := BranchRef{p, "work-rebased"}
	// What was written is a prefix of the job's mutations, in order: let
	// the sequencer decide it, so that the rerun finds it.
	e.waitHead(t, ctx, target, uint64(written))

	res, err := Rebase(ctx, e.cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	e.waitHead(t, ctx, target, n+1)
	if got := e.onTarget(t, target); got != n+1 {
		t.Errorf("the target holds %d mutations, want %d", got, n+1)
	}
	if res.TargetHead != n+1 || res.TargetStateHash != want.TargetStateHash || res.Versions != n+1 {
		t.Errorf("rerun: head %d state %s versions %d; want head %d state %s", res.TargetHead, res.TargetStateHash, res.Versions, n+1, want.TargetStateHash)
	}
	if int64(res.AlreadyOnTarget) != written {
		t.Errorf("the rerun found %d outcomes on the target, the interrupted run wrote %d", res.AlreadyOnTarget, written)
	}
	// And once more, after the kill in the middle of waiting.
	kctx, kill = context.WithCancel(ctx)
	cfg.Progress = func(pr Progress) {
		if pr.Phase == "wait" {
			kill()
		}
	}
	opt.Into = "work-rebased-2"
	if _, err := Rebase(kctx, cfg, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebase: %v, want context.Canceled", err)
	}
	if _, err := Rebase(ctx, e.cfg, opt); err != nil {
		t.Fatal(err)
	}
	if got := e.onTarget(t, BranchRef{p, "work-rebased-2"}); got != n+1 {
		t.Errorf("the second target holds %d mutations, want %d", got, n+1)
	}
}
