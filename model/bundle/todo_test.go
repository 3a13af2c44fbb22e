package bundle_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/canon-sync/canon/model/bundle"
)

var update = flag.Bool("update", false, "rewrite examples/todo/mutators.js from mutators.ts")

const (
	todoTS = "../../examples/todo/mutators.ts"
	todoJS = "../../examples/todo/mutators.js"
)

// The committed build of the todo example is what Build makes of its
// TypeScript today: go test ./model/bundle -run TestTodoBuildCurrent -update
// rewrites it.
func TestTodoBuildCurrent(t *testing.T) {
	got, err := bundle.Build(todoTS)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(todoJS, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(todoJS)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("examples/todo/mutators.js is not the build of mutators.ts: run go test ./model/bundle -run TestTodoBuildCurrent -update")
	}
	b := compile(t, string(want), bundle.Options{})
	if got := b.Names(); len(got) != 4 {
		t.Errorf("names %v", got)
	}
}
