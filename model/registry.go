package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/canon-sync/canon/schemas"
)

// Names of the built-in mutators. Their arguments are documented on their
// implementations and in docs/mutators.md.
const (
	ProjectSet   = "project.set"
	ItemPut      = "item.put"
	ItemPatch    = "item.patch"
	ItemDelete   = "item.delete"
	ItemSplice   = "item.splice"
	BranchCreate = "branch.create"
)

// ReservedPrefixes are the mutator name prefixes of system mutators, which
// only Canon defines: Register refuses them.
var ReservedPrefixes = []string{"branch.", "canon.", "system."}

// Errors of Register.
var (
	// ErrMutatorExists: the name is registered already (built-ins included).
	ErrMutatorExists = errors.New("mutator already registered")
	// ErrReservedName: the name starts with one of ReservedPrefixes.
	ErrReservedName = errors.New("mutator name is reserved")
)

// Registry holds the mutators a Decider runs, by name: the built-ins,
// the system mutators and the ones registered by the application.
//
// Registering a Go function is how users add mutators: build Canon's
// binary with a package that calls Register on the registry handed to the
// sequencer (and to the replay and rebase pipelines, which must decide
// identically) before it starts. Every sequencer instance must have the
// same registry, and a mutator's behavior is part of the history: a
// changed mutator decides old mutations differently on replay. Give a
// changed behavior a new name (item.move2) rather than editing it in
// place.
//
// A Registry is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	m  map[string]registered
}

type registered struct {
	fn Mutator
	// system mutators are run by the Decider itself, not on a Tx.
	system bool
}

// NewRegistry returns a registry with the built-in mutators (project.set,
// item.put, item.patch, item.delete, item.splice) and the system mutator
// branch.create.
func NewRegistry() *Registry {
	r := &Registry{m: make(map[string]registered)}
	for name, fn := range map[string]Mutator{
		ProjectSet: projectSet,
		ItemPut:    itemPut,
		ItemPatch:  itemPatch,
		ItemDelete: itemDelete,
		ItemSplice: itemSplice,
	} {
		r.m[name] = registered{fn: fn}
	}
	r.m[BranchCreate] = registered{fn: systemOnly(BranchCreate), system: true}
	return r
}

// Register adds a mutator under name. The name must be valid
// (schemas.ValidateMutatorName), not registered yet (ErrMutatorExists;
// built-ins cannot be replaced) and not start with a reserved system
// prefix (ErrReservedName). Register before the registry is used: a
// mutation whose mutator is missing is recorded with an error outcome,
// and that is final.
func (r *Registry) Register(name string, m Mutator) error {
	if err := schemas.ValidateMutatorName("name", name); err != nil {
		return fmt.Errorf("register mutator: %w", err)
	}
	if m == nil {
		return fmt.Errorf("register mutator %q: the function is nil", name)
	}
	for _, p := range ReservedPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("register mutator %q: %w: the prefix %q is for system mutators", name, ErrReservedName, p)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[name]; ok {
		return fmt.Errorf("register mutator %q: %w", name, ErrMutatorExists)
	}
	r.m[name] = registered{fn: m}
	return nil
}

// Lookup returns the mutator registered under name. A system mutator is
// listed too, but its function only returns an error: the Decider runs
// it.
func (r *Registry) Lookup(name string) (Mutator, bool) {
	e, ok := r.lookup(name)
	return e.fn, ok
}

// Names lists the registered mutators, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (r *Registry) lookup(name string) (registered, bool) {
	r.mu.RLock()
	e, ok := r.m[name]
	r.mu.RUnlock()
	return e, ok
}

func systemOnly(name string) Mutator {
	return func(Tx, json.RawMessage) error {
		return fmt.Errorf("%s is a system mutator: only the Decider runs it", name)
	}
}
