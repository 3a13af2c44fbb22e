package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// Clients of the mutations jobs make themselves on their targets.
const (
	ReplayClient = "canon-replay"
	RebaseClient = "canon-rebase"
	ImportClient = "canon-import"
)

// ParseProject parses ORG/PROJECT.
func ParseProject(s string) (ProjectRef, error) {
	org, project, ok := strings.Cut(s, "/")
	if !ok {
		return ProjectRef{}, fmt.Errorf("project %q: write it as ORG/PROJECT", s)
	}
	if err := schemas.ValidateOrg("org", org); err != nil {
		return ProjectRef{}, fmt.Errorf("project %q: %w", s, err)
	}
	if err := schemas.ValidateProject("project", project); err != nil {
		return ProjectRef{}, fmt.Errorf("project %q: %w", s, err)
	}
	return ProjectRef{org, project}, nil
}

// BranchAt is BRANCH or BRANCH@VERSION; Version 0 means the branch's head.
type BranchAt struct {
	Branch  string
	Version uint64
}

// ParseBranchAt parses BRANCH or BRANCH@VERSION.
func ParseBranchAt(s string) (BranchAt, error) {
	name, ver, hasVer := strings.Cut(s, "@")
	if err := schemas.ValidateBranch("branch", name); err != nil {
		return BranchAt{}, fmt.Errorf("%q: %w (write BRANCH or BRANCH@VERSION)", s, err)
	}
	b := BranchAt{Branch: name}
	if hasVer {
		v, err := strconv.ParseUint(ver, 10, 64)
		if err != nil || v == 0 {
			return BranchAt{}, fmt.Errorf("%q: the version after @ must be an integer >= 1", s)
		}
		b.Version = v
	}
	return b, nil
}

func (b BranchAt) String() string {
	if b.Version == 0 {
		return b.Branch
	}
	return fmt.Sprintf("%s@%d", b.Branch, b.Version)
}

// versionRange checks and completes from..to on a branch of the history:
// from defaults to 1, to to the head.
func (h *history) versionRange(src BranchRef, from, to uint64) (uint64, uint64, error) {
	head := h.head(src)
	if head == 0 {
		return 0, 0, optionErrorf("branch %s has no versions in %s: check {Source.Project}, {Source.Branch} and {Config.Topics}", src, h.cfg.Topics.Versions)
	}
	if from == 0 {
		from = 1
	}
	if to == 0 {
		to = head
	}
	switch {
	case to > head:
		return 0, 0, optionErrorf("{To} %d: branch %s has versions 1 to %d", to, src, head)
	case from > to:
		return 0, 0, optionErrorf("{From} %d is after {To} %d", from, to)
	}
	return from, to, nil
}

// sourceSteps re-sends the mutations of versions from..to of src to
// target. Ids are renumbered so that they follow each other on the
// target: a client's id on the target is its id on src minus its last id
// on src at version from-1 (the same mapping on every run, which is what
// makes a rerun's copies duplicates).
func (h *history) sourceSteps(src BranchRef, from, to uint64, target BranchRef, tool string) ([]step, error) {
	shift := h.lastIDs(src, from-1)
	var steps []step
	for v := from; v <= to; v++ {
		ver := h.version(src, v)
		for k, o := range ver.Mutations {
			if o.Client == tool {
				return nil, optionErrorf("client %s of version %d of %s is the job's own client name: rename the job's client ({Client})", o.Client, v, src)
			}
			args, err := h.args(src.ProjectRef, &ver.Mutations[k])
			if err != nil {
				return nil, err
			}
			steps = append(steps, step{
				m:    resent(o, o.ID-shift[o.Client], args, target),
				ts:   time.UnixMilli(ver.TS).UTC(),
				orig: &origin{src: src, version: v, outcome: o, last: k == len(ver.Mutations)-1, stateHash: ver.StateHash, items: ver.Items, bundle: ver.Bundle},
			})
		}
	}
	return steps, nil
}

func resent(o schemas.Outcome, id uint64, args []byte, target BranchRef) schemas.Mutation {
	if len(args) == 0 {
		args = []byte("null")
	}
	return schemas.Mutation{
		Org: target.Org, Project: target.Project, Branch: target.Branch,
		ClientGroup: o.ClientGroup, Client: o.Client, ID: id,
		Name: o.Name, Args: args, TS: o.TS,
	}
}

// createStep is the job's branch.create of target from base.
func createStep(target BranchRef, tool string, base BranchAt, ts int64) step {
	args, _ := json.Marshal(map[string]any{"from": base.Branch, "version": base.Version})
	return step{
		m: schemas.Mutation{
			Org: target.Org, Project: target.Project, Branch: target.Branch,
			ClientGroup: DefaultClientGroup, Client: tool, ID: 1,
			Name: model.BranchCreate, Args: args,
		},
		ts: time.UnixMilli(ts).UTC(),
	}
}

// resolveBase completes a base branch and version: a base without a
// version is the branch's head, or, when an earlier run of the job made
// the target from that branch, the version it used, so that a rerun
// sends the same branch.create.
func (h *history) resolveBase(p ProjectRef, base BranchAt, target BranchRef) (BranchAt, error) {
	b := BranchRef{p, base.Branch}
	head := h.head(b)
	if head == 0 {
		return BranchAt{}, fmt.Errorf("base branch %s does not exist", b)
	}
	if base.Version > head {
		return BranchAt{}, fmt.Errorf("base %s: branch %s has versions 1 to %d", base, b, head)
	}
	if base.Version == 0 {
		base.Version = head
		if v1 := h.version(target, 1); v1 != nil && v1.Base != nil && v1.Base.Branch == base.Branch {
			base.Version = v1.Base.Version
		}
	}
	return base, nil
}

// checkTarget refuses a target that exists but was not made by this job:
// a rerun continues only on its own earlier work.
func (h *history) checkTarget(target BranchRef, steps []step, base *BranchAt) error {
	vs := h.branches[target]
	if len(vs) == 0 {
		return nil
	}
	const hint = "choose another target name ({Into})"
	if base != nil {
		got := vs[0].Base
		if got == nil || got.Branch != base.Branch || got.Version != base.Version {
			return optionErrorf("%s exists and was not made from %s by this job (its version 1 is %s): "+hint, target, base, describeBase(vs[0]))
		}
	}
	in := make(map[clientID]bool, len(steps))
	for _, s := range steps {
		in[clientID{s.m.Client, s.m.ID}] = true
	}
	for _, v := range vs {
		for _, o := range v.Mutations {
			if !in[clientID{o.Client, o.ID}] {
				return optionErrorf("%s exists and holds a mutation this job does not send (client %s, id %d, %s, version %d): "+hint,
					target, o.Client, o.ID, o.Name, v.Version)
			}
		}
	}
	return nil
}

func describeBase(v *schemas.Version) string {
	if v.Base == nil {
		return "not a branch.create"
	}
	return fmt.Sprintf("a branch.create from %s@%d", v.Base.Branch, v.Base.Version)
}

// run executes the steps on target: in memory (nothing is produced) or
// through Kafka and the sequencer. It returns each step's result and how
// many the target held before.
func (h *history) run(ctx context.Context, target BranchRef, steps []step, inMemory bool) ([]result, int, error) {
	if !inMemory {
		if err := h.checkKafkaBundles(target, steps); err != nil {
			return nil, 0, err
		}
		res, err := h.produceAndWait(ctx, target, steps)
		if err != nil {
			return nil, 0, err
		}
		n := 0
		for _, r := range res {
			if r.existing {
				n++
			}
		}
		return res, n, nil
	}
	before := make([]result, len(steps))
	n := h.existing(target, steps, before)
	res, err := h.decide(target.ProjectRef, steps)
	if err != nil {
		return nil, 0, err
	}
	for i := range res {
		if before[i].existing {
			res[i] = before[i]
		}
	}
	return res, n, nil
}

// register makes a project known to the history (an in-memory target
// that was not read).
func (h *history) register(p ProjectRef) {
	if _, ok := h.projects[p]; !ok {
		h.projects[p] = schemas.Partition(schemas.ProjectKey(p.Org, p.Project), h.partitions)
	}
}
