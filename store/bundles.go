package store

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/schemas"
)

// Mutator bundles. A deploy/v1 record of the changelog activates a bundle
// in its partition for a project, or for an org (then it is in every
// partition); the store keeps the bundle's source by hash and the active
// deploy of each scope, per partition, so that a partition dropped and
// rebuilt from the changelog knows them again:
//
//	0E bundle  org, hash                 → bundle source
//	0F active  org, project ("" for org) → the deploy, without the source (JSON)
const (
	kindBundle byte = 0x0E
	kindActive byte = 0x0F
)

// Deployed is a bundle activation the store holds: a deploy/v1 record of
// the changelog without its source.
type Deployed struct {
	Org string `json:"org"`
	// Project is empty for an org deploy.
	Project    string            `json:"project,omitempty"`
	Hash       string            `json:"hash"`
	Principal  string            `json:"principal,omitempty"`
	DeployedAt int64             `json:"deployedAt"`
	Source     schemas.SourceRef `json:"source"`
	// ActivatedAt is the deploy record's timestamp in canon.mutations (ms).
	ActivatedAt int64 `json:"activatedAt,omitempty"`
}

type scopeID struct{ org, project string }

func bundleKey(p int32, org, hash string) []byte {
	b := appendPartition(make([]byte, 0, 64), uint32(p))
	b = append(b, kindBundle)
	b = appendString(b, org)
	return append(b, hash...)
}

func activeKey(p int32, org, project string) []byte {
	b := appendPartition(make([]byte, 0, 64), uint32(p))
	b = append(b, kindActive)
	b = appendString(b, org)
	return appendString(b, project)
}

// applyDeploy writes an activation: the bundle by hash, and the scope's
// active deploy unless the store holds a later one.
func (a *applier) applyDeploy(d *schemas.Deploy) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if d.Source == nil {
		return fmt.Errorf("%w: the deploy has no source: only the sequencer's activations belong in the changelog", ErrInvalid)
	}
	if d.Project != "" {
		if err := a.checkProject(d.Org, d.Project); err != nil {
			return err
		}
	}
	if d.Source.Partition != a.p {
		return fmt.Errorf("%w: the deploy's source is in partition %d", ErrWrongPartition, d.Source.Partition)
	}
	prev, ok, err := readDeployed(a.r, a.p, d.Org, d.Project)
	if err != nil {
		return err
	}
	if pending, ok2 := a.deploys[scopeID{d.Org, d.Project}]; ok2 {
		prev, ok = pending, true
	}
	if ok && prev.Source.Offset >= d.Source.Offset {
		return nil // applied already
	}
	if err := a.b.Set(bundleKey(a.p, d.Org, d.Hash), []byte(d.Bundle), nil); err != nil {
		return err
	}
	dep := Deployed{Org: d.Org, Project: d.Project, Hash: d.Hash, Principal: d.Principal, DeployedAt: d.DeployedAt,
		Source: *d.Source, ActivatedAt: d.ActivatedAt}
	val, err := json.Marshal(dep)
	if err != nil {
		return err
	}
	if err := a.b.Set(activeKey(a.p, d.Org, d.Project), val, nil); err != nil {
		return err
	}
	if a.deploys == nil {
		a.deploys = map[scopeID]Deployed{}
	}
	a.deploys[scopeID{d.Org, d.Project}] = dep
	if !a.sourceSet || d.Source.Offset > a.source {
		a.source, a.sourceSet = d.Source.Offset, true
	}
	return nil
}

func readDeployed(r pebble.Reader, p int32, org, project string) (Deployed, bool, error) {
	var d Deployed
	found, err := view(r, activeKey(p, org, project), func(v []byte) error {
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("%w: active bundle of %s/%s: %w", ErrCorrupt, org, project, err)
		}
		return nil
	})
	return d, found, err
}

// Deployment returns the bundle deployed for exactly one scope in
// partition p (project "" for the org's), as of the store's committed
// changelog: no override is resolved.
func (s *Store) Deployment(p int32, org, project string) (Deployed, bool, error) {
	if err := s.checkPartition(p); err != nil {
		return Deployed{}, false, err
	}
	ps := &s.parts[p]
	ps.bundleMu.RLock()
	if ps.deploysLoaded {
		d, ok := ps.deploys[scopeID{org, project}]
		ps.bundleMu.RUnlock()
		return d, ok, nil
	}
	gen := ps.deployGen
	ps.bundleMu.RUnlock()
	// Load the partition's activations once; Apply keeps them current.
	all := map[scopeID]Deployed{}
	start := append(partitionPrefix(p), kindActive)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
	if err != nil {
		return Deployed{}, false, err
	}
	for it.First(); it.Valid(); it.Next() {
		var d Deployed
		if err := json.Unmarshal(it.Value(), &d); err != nil {
			_ = it.Close()
			return Deployed{}, false, fmt.Errorf("%w: active bundle in partition %d: %w", ErrCorrupt, p, err)
		}
		all[scopeID{d.Org, d.Project}] = d
	}
	if err := it.Close(); err != nil {
		return Deployed{}, false, err
	}
	ps.bundleMu.Lock()
	if ps.deployGen == gen && !ps.deploysLoaded {
		ps.deploys, ps.deploysLoaded = all, true
	}
	ps.bundleMu.Unlock()
	d, ok := all[scopeID{org, project}]
	return d, ok, nil
}

// ActiveBundle returns the bundle that decides a project's mutations as
// of the store's committed changelog: the project's own deploy, else its
// org's (in the project's partition); ok is false when neither exists.
func (s *Store) ActiveBundle(org, project string) (Deployed, bool, error) {
	p := s.PartitionOf(org, project)
	if d, ok, err := s.Deployment(p, org, project); err != nil || ok {
		return d, ok, err
	}
	return s.Deployment(p, org, "")
}

// Bundle returns the source of a bundle deployed in partition p by its
// hash, for org.
func (s *Store) Bundle(p int32, org, hash string) ([]byte, bool, error) {
	if err := s.checkPartition(p); err != nil {
		return nil, false, err
	}
	v, ok, err := get(s.db, bundleKey(p, org, hash))
	if err != nil {
		return nil, false, fmt.Errorf("read bundle %s of %s: %w", hash, org, err)
	}
	return v, ok, nil
}

// committedDeploys notes the activations an Apply committed.
func (ps *partitionState) committedDeploys(ds map[scopeID]Deployed) {
	if len(ds) == 0 {
		return
	}
	ps.bundleMu.Lock()
	defer ps.bundleMu.Unlock()
	ps.deployGen++
	if !ps.deploysLoaded {
		return
	}
	for k, d := range ds {
		ps.deploys[k] = d
	}
}

// forgetDeploys drops the remembered activations (a failed commit, a
// dropped partition).
func (ps *partitionState) forgetDeploys() {
	ps.bundleMu.Lock()
	defer ps.bundleMu.Unlock()
	ps.deployGen++
	ps.deploys, ps.deploysLoaded = nil, false
}

// Deployments returns the activations of an org's scopes in partition p
// (its org deploy, project "", and its projects' own), as of the store's
// committed changelog, sorted by project.
func (s *Store) Deployments(p int32, org string) ([]Deployed, error) {
	if err := s.checkPartition(p); err != nil {
		return nil, err
	}
	start := appendString(append(partitionPrefix(p), kindActive), org)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
	if err != nil {
		return nil, err
	}
	var out []Deployed
	for it.First(); it.Valid(); it.Next() {
		var d Deployed
		if err := json.Unmarshal(it.Value(), &d); err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("%w: active bundle in partition %d: %w", ErrCorrupt, p, err)
		}
		if d.Org == org {
			out = append(out, d)
		}
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}
