package pipelines

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// ImportOptions says which snapshot goes where.
type ImportOptions struct {
	Snapshot *Snapshot
	// Target is the new project's main branch, or a new branch of an
	// existing project.
	Target BranchRef
	// From is the branch (and version, 0: its head) a new branch is made
	// from; default main. The snapshot's state is reached from there by
	// the job's own mutations, so a base close to the snapshot makes few.
	From *BranchAt
	// DryRun decides in memory and produces nothing.
	DryRun bool
	// Client is the client of the job's mutations (default ImportClient).
	Client string
}

// ImportResult is the summary of an import.
type ImportResult struct {
	Target string `json:"target"`
	From   string `json:"from,omitempty"`
	DryRun bool   `json:"dryRun"`
	Counts
	TargetHead      uint64 `json:"targetHead"`
	TargetStateHash string `json:"targetStateHash"`
	// SnapshotStateHash is the snapshot's; Matches says the target's head
	// has it.
	SnapshotStateHash string `json:"snapshotStateHash"`
	Matches           bool   `json:"matches"`
	ElapsedMS         int64  `json:"elapsedMs"`
}

// Import writes a snapshot as the main branch of a new project, or as a
// new branch made from another one.
func Import(ctx context.Context, cfg Config, opt ImportOptions) (*ImportResult, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if opt.Snapshot == nil {
		return nil, errors.New("import: no snapshot")
	}
	tool := opt.Client
	if tool == "" {
		tool = ImportClient
	}
	target := opt.Target
	if err := schemas.ValidateBranch("branch", target.Branch); err != nil {
		return nil, optionErrorf("{Target.Branch}: %w", err)
	}
	snapHash, err := snapshotHash(opt.Snapshot)
	if err != nil {
		return nil, err
	}
	h, err := readHistory(ctx, cfg, !opt.DryRun, target.ProjectRef)
	if err != nil {
		return nil, err
	}
	h.setJob(JobImport)
	defer h.Close()
	res := &ImportResult{Target: target.String(), DryRun: opt.DryRun, SnapshotStateHash: snapHash}
	now := time.Now().UTC()
	var plan []step
	var base *BranchAt
	if target.Branch == schemas.DefaultBranch {
		if opt.From != nil {
			return nil, optionErrorf("{From} is for a new branch: the main branch of a new project starts empty")
		}
		if v1 := h.version(target, 1); v1 != nil && v1.Mutations[0].Client != tool {
			return nil, optionErrorf("project %s exists: import the snapshot as a new branch of it with {Target.Branch} NAME, or into a new project", target.ProjectRef)
		}
		if plan = snapshotSteps(nil, opt.Snapshot, target, tool, 1, now); len(plan) == 0 {
			return nil, errors.New("the snapshot is empty: a new project's first mutation must set something")
		}
	} else {
		from := BranchAt{Branch: schemas.DefaultBranch}
		if opt.From != nil {
			from = *opt.From
		}
		b, err := h.resolveBase(target.ProjectRef, from, target)
		if err != nil {
			return nil, optionErrorf("{From}: %w", err)
		}
		base, res.From = &b, b.String()
		var st store.State
		if st, err = h.store.StateAt(target.Org, target.Project, b.Branch, b.Version, false); err != nil {
			return nil, err
		}
		plan = append(plan, createStep(target, tool, b, now.UnixMilli()))
		plan = append(plan, snapshotSteps(&st, opt.Snapshot, target, tool, 2, now)...)
	}
	if err := h.checkTarget(target, plan, base); err != nil {
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
	res.TargetHead = h.head(target)
	if v := h.version(target, res.TargetHead); v != nil {
		res.TargetStateHash = v.StateHash
	}
	res.Matches = res.TargetStateHash == snapHash
	res.ElapsedMS = time.Since(start).Milliseconds()
	return res, nil
}

// snapshotHash is the state hash of a snapshot's items and scalars.
func snapshotHash(s *Snapshot) (string, error) {
	var sum schemas.StateHasher
	for _, it := range s.Items {
		sum.Add(schemas.ItemDigest(it.Collection, it.ID, it.Meta, it.Hash))
	}
	h, err := sum.StateHash(s.Scalars)
	if err != nil {
		return "", fmt.Errorf("snapshot state hash: %w", err)
	}
	return h, nil
}
