package model

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	reg := NewRegistry()
	want := []string{BranchCreate, ItemDelete, ItemPatch, ItemPut, ItemSplice, ProjectSet}
	if got := reg.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	noop := func(Tx, json.RawMessage) error { return nil }
	if err := reg.Register("todo.toggle", noop); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, ok := reg.Lookup("todo.toggle"); !ok {
		t.Errorf("a registered mutator is not found")
	}
	if _, ok := reg.Lookup("todo.other"); ok {
		t.Errorf("an unregistered mutator is found")
	}
	for _, tc := range []struct {
		name   string
		fn     Mutator
		is     error
		reason string
	}{
		{name: "todo.toggle", fn: noop, is: ErrMutatorExists},
		{name: ItemPut, fn: noop, is: ErrMutatorExists},
		{name: "branch.merge", fn: noop, is: ErrReservedName},
		{name: "canon.x", fn: noop, is: ErrReservedName},
		{name: "system.x", fn: noop, is: ErrReservedName},
		{name: "", fn: noop, reason: "not a valid mutator name"},
		{name: "1abc", fn: noop, reason: "not a valid mutator name"},
		{name: "todo toggle", fn: noop, reason: "not a valid mutator name"},
		{name: "todo.nil", fn: nil, reason: "nil"},
	} {
		err := reg.Register(tc.name, tc.fn)
		switch {
		case err == nil:
			t.Errorf("Register(%q) succeeded", tc.name)
		case tc.is != nil && !errors.Is(err, tc.is):
			t.Errorf("Register(%q) = %v, want %v", tc.name, err, tc.is)
		case tc.reason != "" && !strings.Contains(err.Error(), tc.reason):
			t.Errorf("Register(%q) = %v, want it to say %q", tc.name, err, tc.reason)
		}
	}
	// branch.create is listed, but only the Decider runs it.
	fn, ok := reg.Lookup(BranchCreate)
	if !ok {
		t.Fatalf("branch.create is not listed")
	}
	if err := fn(nil, json.RawMessage(`{"from":"main"}`)); err == nil || !strings.Contains(err.Error(), "system mutator") {
		t.Errorf("running branch.create on a Tx: %v", err)
	}
}
