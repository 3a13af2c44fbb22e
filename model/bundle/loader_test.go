package bundle

import (
	"strings"
	"testing"
)

// The loader is the module's code and a return of its exports where
// esbuild's output has the shape directLoader knows, esbuild's IIFE form
// otherwise; both give the same exports (run by TestLoaderForms).
func TestLoaderForms(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		direct    bool
	}{
		{"default", `let n = 0; export default {"a.b": () => ++n};`, true},
		{"mutators", `export const mutators = {"a.b": () => 1};`, true},
		{"renamed", `const m = {"a.b": () => 1}; export { m as default, m as mutators }; export let z = 3;`, true},
		{"default function", `export default function f() { return 1; }; export const mutators = {"a.b": () => f()};`, true},
		{"dollar names", `const $m = {"a.b": () => 1}; export { $m as mutators };`, true},
		{"import.meta", `export default {"a.b": () => typeof import.meta};`, false},
		{"string export name", `const m = {"a.b": () => 1}; export { m as "mutators" };`, true}, // esbuild makes it an identifier
		{"non-identifier export name", `const m = {"a.b": () => 1}; export { m as "default", m as "not an identifier" };`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loader, err := transform([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if direct := !strings.Contains(loader, "__canon_exports"); direct != tc.direct {
				t.Errorf("direct %v, want %v:\n%s", direct, tc.direct, loader)
			}
			b, err := Compile([]byte(tc.src), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := strings.Join(b.Names(), ","); got != "a.b" {
				t.Errorf("names %q", got)
			}
		})
	}
}
