package model

import (
	"fmt"
	"sync"
)

// A MutatorSet is a deployed mutator bundle: the mutators it exports by
// name, and its bundle hash (the lower-case hex SHA-256 of its bytes),
// which the versions it decides record. A MutatorSet must be safe for
// concurrent use. Package model/bundle compiles JavaScript bundles into
// one.
type MutatorSet interface {
	Hash() string
	Mutator(name string) (Mutator, bool)
}

// Bundles is what a Decider knows of the deployed bundles at the
// committed state: the sequencer answers from its store, the pipelines
// from the bundle a version recorded. A deploy takes effect at its
// position in a partition's order, so a deploy is per partition; an org
// deploy is in every partition.
type Bundles interface {
	// Deployed returns the bundle deployed for exactly one scope, a
	// project or (project "") its org, in partition p; nil when none.
	Deployed(p int32, org, project string) (MutatorSet, error)
}

type scopeKey struct {
	p            int32
	org, project string
}

// SetBundles makes the Decider resolve a mutation's name in the bundle
// active for its project first (the project's deploy, else its org's),
// then in the registry. Without it only the registry is used.
func (d *Decider) SetBundles(b Bundles) { d.bundles = b }

// Activate makes set the bundle of a scope (project "" for the org) in
// partition p from the next decision on: the sequencer calls it where it
// decides a deploy, in order with the mutations. It is part of the
// overlay: Reset drops it, and the committed state (Bundles) must know
// it by then.
func (d *Decider) Activate(p int32, org, project string, set MutatorSet) {
	if d.activated == nil {
		d.activated = map[scopeKey]MutatorSet{}
	}
	d.activated[scopeKey{p, org, project}] = set
}

// Deployed returns the bundle deployed for exactly one scope in
// partition p as the next decision sees it: activated in the overlay,
// else committed; nil when none.
func (d *Decider) Deployed(p int32, org, project string) (MutatorSet, error) {
	if set, ok := d.activated[scopeKey{p, org, project}]; ok {
		return set, nil
	}
	if d.bundles == nil {
		return nil, nil
	}
	return d.bundles.Deployed(p, org, project)
}

// activeBundle is the bundle that decides a project's mutations: the
// project's deploy overrides the org's.
func (d *Decider) activeBundle(p int32, org, project string) (MutatorSet, error) {
	if d.bundles == nil && len(d.activated) == 0 {
		return nil, nil
	}
	set, err := d.Deployed(p, org, project)
	if err != nil || set != nil {
		return set, err
	}
	return d.Deployed(p, org, "")
}

// BundleCache compiles each bundle once, by hash: the sequencer, replay
// and rebase decide many mutations with few bundles. It is safe for
// concurrent use.
type BundleCache struct {
	compile func(src []byte) (MutatorSet, error)
	mu      sync.Mutex
	sets    map[string]MutatorSet
}

// maxCachedBundles bounds a BundleCache; beyond it an arbitrary bundle is
// dropped for each new one (and compiled again when it is used again).
const maxCachedBundles = 256

// NewBundleCache returns a cache over compile, which compiles a bundle's
// source into its mutators.
func NewBundleCache(compile func(src []byte) (MutatorSet, error)) *BundleCache {
	return &BundleCache{compile: compile, sets: map[string]MutatorSet{}}
}

// Get returns the compiled bundle of a hash, compiling what source
// returns when it is not cached. A source whose hash is not hash is an
// error.
func (c *BundleCache) Get(hash string, source func() ([]byte, error)) (MutatorSet, error) {
	c.mu.Lock()
	set, ok := c.sets[hash]
	c.mu.Unlock()
	if ok {
		return set, nil
	}
	src, err := source()
	if err != nil {
		return nil, err
	}
	set, err = c.compile(src)
	if err != nil {
		return nil, fmt.Errorf("compile bundle %s: %w", hash, err)
	}
	if set.Hash() != hash {
		return nil, fmt.Errorf("bundle %s: its source has hash %s", hash, set.Hash())
	}
	c.Put(set)
	return set, nil
}

// Put adds a compiled bundle.
func (c *BundleCache) Put(set MutatorSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sets[set.Hash()]; !ok && len(c.sets) >= maxCachedBundles {
		for h := range c.sets {
			delete(c.sets, h)
			break
		}
	}
	c.sets[set.Hash()] = set
}

// Compile compiles a bundle's source and caches the result; it always
// compiles (Get returns a cached bundle by its hash without compiling).
func (c *BundleCache) Compile(src []byte) (MutatorSet, error) {
	set, err := c.compile(src)
	if err != nil {
		return nil, err
	}
	c.Put(set)
	return set, nil
}
