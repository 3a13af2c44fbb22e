package pipelines

import (
	"fmt"

	"github.com/canon-sync/canon/model"
)

// stepBundles is what an in-memory decision of a job knows of the
// mutator bundles: a step that re-sends a source mutation is decided with
// the bundle its source version recorded (replay checks that this gives
// the same state), or with Config.Mutators for every step when set
// (rebase --mutators: "what if this history had run under new logic").
// A step of the job's own (branch.create) runs the built-ins.
type stepBundles struct {
	h   *history
	p   int32
	cur *step
}

func (sb *stepBundles) Deployed(_ int32, org, project string) (model.MutatorSet, error) {
	if project == "" || sb.cur == nil {
		return nil, nil // no org scope: the step's bundle is the project's
	}
	if sb.h.cfg.Mutators != nil {
		return sb.h.cfg.Mutators, nil
	}
	o := sb.cur.orig
	if o == nil || o.bundle == "" {
		return nil, nil
	}
	if sb.h.cfg.Bundles == nil {
		return nil, fmt.Errorf("version %d of %s was decided by mutator bundle %s, and this job has no JavaScript engine (Config.Bundles)",
			o.version, o.src, o.bundle)
	}
	src := o.src.ProjectRef
	return sb.h.cfg.Bundles.Get(o.bundle, func() ([]byte, error) {
		b, ok, err := sb.h.store.Bundle(sb.h.projects[src], src.Org, o.bundle)
		if err == nil && !ok {
			err = fmt.Errorf("version %d of %s was decided by mutator bundle %s, which the changelog of %s does not hold (its deploy record is missing)",
				o.version, o.src, o.bundle, src)
		}
		return b, err
	})
}

// checkKafkaBundles refuses a job through Kafka that cannot decide as it
// says: the sequencer decides with the target project's active bundle,
// so {Mutators} cannot apply, and a replay (which checks that it
// reproduces each version) must not meet a version of another bundle. A
// rebase through Kafka decides with the active bundle by design.
func (h *history) checkKafkaBundles(target BranchRef, steps []step) error {
	if h.cfg.Mutators != nil {
		return optionErrorf("{Mutators} decides in memory only: the sequencers decide with the project's deployed bundle (use a dry run, or deploy the bundle)")
	}
	if h.job == nil || h.job.Kind != JobReplay {
		return nil
	}
	active := ""
	if d, ok, err := h.store.ActiveBundle(target.Org, target.Project); err != nil {
		return err
	} else if ok {
		active = d.Hash
	}
	for i := range steps {
		o := steps[i].orig
		if o == nil || o.bundle == "" || o.bundle == active {
			continue
		}
		return optionErrorf("version %d of %s was decided by mutator bundle %s, but the sequencers decide %s with bundle %q: run the job in memory, which uses each version's bundle",
			o.version, o.src, o.bundle, target.ProjectRef, active)
	}
	return nil
}
