package pipelines

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// MutationRef names a re-sent mutation: its client, its id on the source
// and on the target, and its mutator.
type MutationRef struct {
	Client   string `json:"client"`
	ID       uint64 `json:"id"`
	TargetID uint64 `json:"targetId"`
	Name     string `json:"name"`
}

// Divergence is the first place where a replay differs from the source.
type Divergence struct {
	// Version is the source's version, TargetVersion the replay's (0 when
	// the replay made none).
	Version       uint64      `json:"version"`
	TargetVersion uint64      `json:"targetVersion,omitempty"`
	Mutation      MutationRef `json:"mutation"`
	// Status and Error of the mutation on the source and in the replay.
	Status         string `json:"status"`
	ReplayedStatus string `json:"replayedStatus"`
	Error          string `json:"error,omitempty"`
	ReplayedError  string `json:"replayedError,omitempty"`
	// StateHash and ReplayedStateHash after the version.
	StateHash         string `json:"stateHash,omitempty"`
	ReplayedStateHash string `json:"replayedStateHash,omitempty"`
	// Item is the first item the version changed differently; Scalars is
	// set when the items agree and the scalars do not.
	Item    *ItemDiff `json:"item,omitempty"`
	Scalars bool      `json:"scalars,omitempty"`
}

// ItemDiff is an item that differs between two states (or two versions'
// changes): its body hash and meta on each side; an empty hash means the
// item is absent (or deleted) there.
type ItemDiff struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Change     string          `json:"change"` // "only in source", "only in target", "differs"
	SourceHash string          `json:"sourceHash,omitempty"`
	TargetHash string          `json:"targetHash,omitempty"`
	SourceMeta json.RawMessage `json:"sourceMeta,omitempty"`
	TargetMeta json.RawMessage `json:"targetMeta,omitempty"`
}

// firstDivergence compares each re-sent step's outcome with its source
// outcome, and the state hash after each source version with the
// replay's after the same mutation.
func firstDivergence(steps []step, results []result) *Divergence {
	for i, s := range steps {
		o := s.orig
		if o == nil {
			continue
		}
		r := results[i]
		statusDiffers := !sameOutcome(o.outcome, r)
		hashDiffers := o.last && r.stateHash != o.stateHash
		if !statusDiffers && !hashDiffers {
			continue
		}
		d := &Divergence{
			Version: o.version, TargetVersion: r.version,
			Mutation:       MutationRef{Client: o.outcome.Client, ID: o.outcome.ID, TargetID: s.m.ID, Name: o.outcome.Name},
			Status:         o.outcome.Status,
			ReplayedStatus: r.status(),
			Error:          o.outcome.Error,
			ReplayedError:  r.errMsg,
		}
		if o.last {
			d.StateHash, d.ReplayedStateHash = o.stateHash, r.stateHash
		}
		if hashDiffers {
			d.Item = firstChangeDiff(o.items, r.items)
			d.Scalars = d.Item == nil
		}
		return d
	}
	return nil
}

// sameOutcome reports whether a re-sent mutation had the outcome of the
// original: the same status and error. A branch.create's error names the
// branch it was sent to, which is the target's on a replay: only its
// status counts.
func sameOutcome(o schemas.Outcome, r result) bool {
	if r.status() != o.Status {
		return false
	}
	return o.Name == model.BranchCreate || r.errMsg == o.Error
}

// firstChangeDiff is the first item, in (collection, id) order, that two
// versions' item changes treat differently; nil if they agree.
func firstChangeDiff(src, dst []schemas.ItemChange) *ItemDiff {
	type side struct {
		hash string
		meta json.RawMessage
	}
	key := func(c schemas.ItemChange) [2]string { return [2]string{c.Collection, c.ID} }
	val := func(c schemas.ItemChange) side {
		if c.Op == schemas.OpDelete {
			return side{hash: "", meta: nil}
		}
		return side{hash: c.Hash, meta: c.Meta}
	}
	a, b := map[[2]string]side{}, map[[2]string]side{}
	var keys [][2]string
	for _, c := range src {
		a[key(c)] = val(c)
		keys = append(keys, key(c))
	}
	for _, c := range dst {
		if _, ok := a[key(c)]; !ok {
			keys = append(keys, key(c))
		}
		b[key(c)] = val(c)
	}
	slices.SortFunc(keys, func(x, y [2]string) int {
		if c := strings.Compare(x[0], y[0]); c != 0 {
			return c
		}
		return strings.Compare(x[1], y[1])
	})
	for _, k := range keys {
		x, inA := a[k]
		y, inB := b[k]
		switch {
		case inA && !inB:
			return &ItemDiff{Collection: k[0], ID: k[1], Change: "changed only in source", SourceHash: x.hash, SourceMeta: x.meta}
		case !inA && inB:
			return &ItemDiff{Collection: k[0], ID: k[1], Change: "changed only in target", TargetHash: y.hash, TargetMeta: y.meta}
		case x.hash != y.hash || !bytes.Equal(x.meta, y.meta):
			return &ItemDiff{Collection: k[0], ID: k[1], Change: "changed differently", SourceHash: x.hash, TargetHash: y.hash, SourceMeta: x.meta, TargetMeta: y.meta}
		}
	}
	return nil
}

// StateDiff is the item-level difference between two states.
type StateDiff struct {
	Scalars []ScalarDiff `json:"scalars"`
	Items   []ItemDiff   `json:"items"`
}

// ScalarDiff is a scalar that differs; a missing side is absent.
type ScalarDiff struct {
	Name   string          `json:"name"`
	Source json.RawMessage `json:"source,omitempty"`
	Target json.RawMessage `json:"target,omitempty"`
}

// diffStates compares the source branch at version sv with the target
// at its head, from the history's store.
func (h *history) diffStates(src BranchRef, sv uint64, dst BranchRef) (StateDiff, error) {
	diff := StateDiff{Scalars: []ScalarDiff{}, Items: []ItemDiff{}}
	a, err := h.store.StateAt(src.Org, src.Project, src.Branch, sv, false)
	if err != nil {
		return diff, err
	}
	b, err := h.store.StateAt(dst.Org, dst.Project, dst.Branch, 0, false)
	if err != nil {
		return diff, err
	}
	names := map[string]bool{}
	for n := range a.Scalars {
		names[n] = true
	}
	for n := range b.Scalars {
		names[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		x, y := a.Scalars[n], b.Scalars[n]
		if !bytes.Equal(x, y) {
			diff.Scalars = append(diff.Scalars, ScalarDiff{Name: n, Source: x, Target: y})
		}
	}
	colls := map[string]bool{}
	for c := range a.Collections {
		colls[c] = true
	}
	for c := range b.Collections {
		colls[c] = true
	}
	for _, c := range slices.Sorted(maps.Keys(colls)) {
		x, y := a.Collections[c], b.Collections[c]
		i, j := 0, 0
		for i < len(x) || j < len(y) {
			switch {
			case j == len(y) || i < len(x) && x[i].ID < y[j].ID:
				diff.Items = append(diff.Items, ItemDiff{Collection: c, ID: x[i].ID, Change: "only in source", SourceHash: x[i].Hash, SourceMeta: x[i].Meta})
				i++
			case i == len(x) || y[j].ID < x[i].ID:
				diff.Items = append(diff.Items, ItemDiff{Collection: c, ID: y[j].ID, Change: "only in target", TargetHash: y[j].Hash, TargetMeta: y[j].Meta})
				j++
			default:
				if x[i].Hash != y[j].Hash || !bytes.Equal(x[i].Meta, y[j].Meta) {
					diff.Items = append(diff.Items, ItemDiff{Collection: c, ID: x[i].ID, Change: "differs",
						SourceHash: x[i].Hash, TargetHash: y[j].Hash, SourceMeta: x[i].Meta, TargetMeta: y[j].Meta})
				}
				i++
				j++
			}
		}
	}
	return diff, nil
}

// Counts of what a job made on its target.
type Counts struct {
	// Mutations the job sends (its own included).
	Mutations int `json:"mutations"`
	// AlreadyOnTarget: outcomes the target held before this run (an
	// earlier, interrupted run's).
	AlreadyOnTarget int `json:"alreadyOnTarget"`
	// Versions the target got from this job (applied and error outcomes),
	// by this run or an earlier one.
	Versions int `json:"versions"`
	Applied  int `json:"applied"`
	Errors   int `json:"errors"`
	// Rejected: not recorded (rejections, gaps, duplicates); a job whose
	// mutation is rejected fails.
	Rejected int `json:"rejected"`
}

func count(results []result, existing int) Counts {
	c := Counts{Mutations: len(results), AlreadyOnTarget: existing}
	for _, r := range results {
		switch r.kind {
		case model.Applied:
			c.Applied++
			c.Versions++
		case model.Errored:
			c.Errors++
			c.Versions++
		default:
			c.Rejected++
		}
	}
	return c
}
