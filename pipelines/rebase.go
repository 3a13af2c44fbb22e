package pipelines

import (
	"context"
	"fmt"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// RebaseOptions says what a rebase moves and where.
type RebaseOptions struct {
	// Source is the branch whose mutations From..To (To 0: its head) are
	// rebased. From is required.
	Source   BranchRef
	From, To uint64
	// Onto is the new base, a branch of the project at a version (0: its
	// head; a rerun keeps the version its first run used). Exactly one
	// of Onto and OntoSnapshot.
	Onto *BranchAt
	// OntoSnapshot is a state to rebase onto: the target is made from
	// Source at version From-1 and turned into the snapshot's state by
	// the job's own mutations first. OntoName names it in the result.
	OntoSnapshot *Snapshot
	OntoName     string
	// Into is the new branch.
	Into string
	// DryRun decides in memory with Config.Registry and produces nothing.
	DryRun bool
	// Client is the client of the job's own mutations (default
	// RebaseClient).
	Client string
}

// Conflict is a mutation whose outcome on the new base differs from the
// original one.
type Conflict struct {
	// Version is the source version that recorded the mutation,
	// TargetVersion the target's (0 when none did).
	Version       uint64      `json:"version"`
	TargetVersion uint64      `json:"targetVersion,omitempty"`
	Mutation      MutationRef `json:"mutation"`
	Status        string      `json:"status"`
	Error         string      `json:"error,omitempty"`
	NewStatus     string      `json:"newStatus"`
	NewError      string      `json:"newError,omitempty"`
}

// RebaseResult is the summary of a rebase.
type RebaseResult struct {
	Source string `json:"source"`
	From   uint64 `json:"from"`
	To     uint64 `json:"to"`
	Onto   string `json:"onto"`
	Target string `json:"target"`
	DryRun bool   `json:"dryRun"`
	Counts
	// Conflicts are the mutations whose outcome (status or error) differs
	// from the original's, in canonical order.
	Conflicts []Conflict `json:"conflicts"`
	// Diff is the item-level difference between Source at To and the
	// target's head.
	Diff            StateDiff `json:"diff"`
	SourceStateHash string    `json:"sourceStateHash"`
	TargetHead      uint64    `json:"targetHead"`
	TargetStateHash string    `json:"targetStateHash"`
	ElapsedMS       int64     `json:"elapsedMs"`
}

// Rebase makes a new branch from a base (branch.create), sends it the
// source's mutations From..To in canonical order with their clients and
// the order of their ids, waits until they are decided and compares.
func Rebase(ctx context.Context, cfg Config, opt RebaseOptions) (*RebaseResult, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tool := opt.Client
	if tool == "" {
		tool = RebaseClient
	}
	switch {
	case (opt.Onto == nil) == (opt.OntoSnapshot == nil):
		return nil, optionErrorf("give exactly one of {Onto} and {OntoSnapshot}")
	case opt.From == 0:
		return nil, optionErrorf("{From} is required: the first version of the source to rebase")
	case opt.Into == "":
		return nil, optionErrorf("{Into} is required: the new branch's name")
	case opt.Into == opt.Source.Branch || opt.Onto != nil && opt.Into == opt.Onto.Branch:
		return nil, optionErrorf("{Into} %s names an existing branch of the job: give a new name", opt.Into)
	}
	if err := schemas.ValidateBranch("into", opt.Into); err != nil {
		return nil, optionErrorf("{Into}: %w", err)
	}
	h, err := readHistory(ctx, cfg, !opt.DryRun, opt.Source.ProjectRef)
	if err != nil {
		return nil, err
	}
	h.setJob(JobRebase)
	defer h.Close()
	src, target := opt.Source, BranchRef{opt.Source.ProjectRef, opt.Into}
	from, to, err := h.versionRange(src, opt.From, opt.To)
	if err != nil {
		return nil, err
	}
	if from == 1 && h.version(src, 1).Base != nil {
		// Version 1 is the source's own branch.create.
		if from = 2; to < 2 {
			return nil, fmt.Errorf("version 1 of %s is its branch.create and nothing follows in the range", src)
		}
	}
	res := &RebaseResult{Source: src.String(), From: from, To: to, Target: target.String(), DryRun: opt.DryRun,
		SourceStateHash: h.version(src, to).StateHash, Conflicts: []Conflict{}}

	var base BranchAt
	var plan []step
	if opt.Onto != nil {
		if base, err = h.resolveBase(src.ProjectRef, *opt.Onto, target); err != nil {
			return nil, optionErrorf("{Onto}: %w", err)
		}
		res.Onto = base.String()
		plan = append(plan, createStep(target, tool, base, h.version(BranchRef{src.ProjectRef, base.Branch}, base.Version).TS))
	} else {
		base = BranchAt{Branch: src.Branch, Version: max(from-1, 1)}
		res.Onto = "snapshot " + opt.OntoName
		bv := h.version(src, base.Version)
		plan = append(plan, createStep(target, tool, base, bv.TS))
		st, err := h.store.StateAt(src.Org, src.Project, src.Branch, base.Version, false)
		if err != nil {
			return nil, err
		}
		plan = append(plan, snapshotSteps(&st, opt.OntoSnapshot, target, tool, 2, time.UnixMilli(bv.TS).UTC())...)
	}
	srcSteps, err := h.sourceSteps(src, from, to, target, tool)
	if err != nil {
		return nil, err
	}
	plan = append(plan, srcSteps...)
	if err := h.checkTarget(target, plan, &base); err != nil {
		return nil, err
	}
	results, existing, err := h.run(ctx, target, plan, opt.DryRun)
	if err != nil {
		return nil, err
	}
	if err := ownStepsDecided(plan, results, target); err != nil {
		return nil, err
	}
	res.Counts = count(results, existing)
	for i, s := range plan {
		o, r := s.orig, results[i]
		if o == nil || sameOutcome(o.outcome, r) {
			continue
		}
		res.Conflicts = append(res.Conflicts, Conflict{
			Version: o.version, TargetVersion: r.version,
			Mutation: MutationRef{Client: o.outcome.Client, ID: o.outcome.ID, TargetID: s.m.ID, Name: o.outcome.Name},
			Status:   o.outcome.Status, Error: o.outcome.Error, NewStatus: r.status(), NewError: r.errMsg,
		})
	}
	if res.Diff, err = h.diffStates(src, to, target); err != nil {
		return nil, err
	}
	res.TargetHead = h.head(target)
	if v := h.version(target, res.TargetHead); v != nil {
		res.TargetStateHash = v.StateHash
	}
	res.ElapsedMS = time.Since(start).Milliseconds()
	return res, nil
}

// ownStepsDecided fails when one of the job's own mutations (its
// branch.create, a snapshot's writes) was not applied: the target is then
// not what the job had to make.
func ownStepsDecided(plan []step, results []result, target BranchRef) error {
	for i, s := range plan {
		if s.orig != nil || results[i].kind == model.Applied {
			continue
		}
		return fmt.Errorf("%s of %s (client %s, id %d) was not applied: %s %s", s.m.Name, target, s.m.Client, s.m.ID, results[i].status(), results[i].errMsg)
	}
	return nil
}
