package bundle_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model/bundle"
)

// Bad bundles are refused at Compile, with an error that says what to fix.
func TestCompileRefuses(t *testing.T) {
	tests := []struct {
		name, src string
		opts      bundle.Options
		err       error
		msg       string
	}{
		{"syntax", "export default {\n  \"a.b\": (tx) => { tx.put( },\n};", bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: 2:28: Unexpected "}"`},
		{"no export", `const x = 1;`, bundle.Options{}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle: the bundle exports no mutators: export default an object"},
		{"default not object", `export default 42;`, bundle.Options{}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle: the bundle's default export is number"},
		{"empty", `export default {};`, bundle.Options{}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: the exported mutators object is empty"},
		{"not a function", `export default {"a.b": 1};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: mutator "a.b" is a number, not a function`},
		{"builtin", `export default {"item.put": () => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: mutator "item.put" is a built-in`},
		{"reserved", `export default {"branch.merge": () => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: mutator "branch.merge": the prefix "branch." is reserved`},
		{"invalid name", `export default {"bad name!": () => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: field "mutator": "bad name!" is not a valid mutator name`},
		{"import", `import x from "lodash"; export default {"a.b": () => x};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: 1:15: the bundle imports "lodash": a bundle must be one self-contained module; bundle it: esbuild --bundle --format=esm`},
		{"relative import", `export * from "./other.js";`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: 1:15: the bundle imports "./other.js"`},
		{"dynamic import", `export default {"a.b": async () => { await import("x"); }};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: 1:51: the bundle imports "x"`},
		{"throws at load", `throw new Error("boom"); export default {"a.b": () => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle: boom"},
		{"loops at load", `for (;;) {} export default {"a.b": () => {}};`, bundle.Options{CPUBudget: 100_000}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle ran over the CPU budget of 100000 steps (--mutator-cpu-budget)"},
		{"hogs at load", `const a = []; for (;;) a.push(new Array(1e6).fill(0)); export default {"a.b": () => {}};`, bundle.Options{MemoryBudget: 8 << 20}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle ran over the memory budget of 8 MiB (--mutator-memory-budget)"},
		{"clock at load", `const t = Date.now(); export default {"a.b": () => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			"invalid mutator bundle: loading the bundle: Date.now() reads the wall clock"},
		{"too large", `export default {"a.b": () => {}};` + strings.Repeat(" ", 100), bundle.Options{MaxBundleBytes: 64}, bundle.ErrBundleTooLarge,
			"mutator bundle too large: 133 bytes, over the limit of 64 bytes"},
		{"typescript", `export default {"a.b": (tx: any) => {}};`, bundle.Options{}, bundle.ErrInvalidBundle,
			`invalid mutator bundle: 1:27: Expected ")" but found ":"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := bundle.Compile([]byte(tc.src), tc.opts)
			if err == nil {
				b.Close()
				t.Fatal("compiled")
			}
			if !errors.Is(err, tc.err) || !strings.HasPrefix(err.Error(), tc.msg) {
				t.Errorf("got %v\nwant %v: %s...", err, tc.err, tc.msg)
			}
		})
	}
}

func TestCompileOptions(t *testing.T) {
	src := []byte(`export default {"a.b": () => {}};`)
	for _, tc := range []struct {
		opts bundle.Options
		msg  string
	}{
		{bundle.Options{CPUBudget: 9999}, "mutator CPU budget of 9999 steps: it must be at least 10000 (--mutator-cpu-budget)"},
		{bundle.Options{CPUBudget: -1}, "mutator CPU budget of -1 steps"},
		{bundle.Options{MemoryBudget: 1000}, "mutator memory budget of 1000 bytes: it must be at least 262144 (256 KiB) (--mutator-memory-budget)"},
		{bundle.Options{MaxBundleBytes: -5}, "mutator bundle size limit of -5 bytes: it must be positive"},
	} {
		if _, err := bundle.Compile(src, tc.opts); err == nil || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%+v: %v, want %s", tc.opts, err, tc.msg)
		}
	}
	b := compile(t, string(src), bundle.Options{CPUBudget: bundle.MinCPUBudget, MemoryBudget: bundle.MinMemoryBudget})
	if o := b.Options(); o.CPUBudget != bundle.MinCPUBudget || o.MemoryBudget != bundle.MinMemoryBudget {
		t.Errorf("options %+v", o)
	}
	if o := newWorld(t, b).do("c", "a.b", `{}`); o.Status != "applied" {
		t.Errorf("a mutation within the smallest budgets: %+v", o)
	}
}

func TestCompile(t *testing.T) {
	src := `export const mutators = {"b.two": () => {}, "a.one": async () => {}};`
	b := compile(t, src, bundle.Options{})
	if got := strings.Join(b.Names(), ","); got != "a.one,b.two" {
		t.Errorf("names %s", got)
	}
	if sum := sha256.Sum256([]byte(src)); b.Hash() != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s", b.Hash())
	}
	if string(b.Source()) != src {
		t.Error("source changed")
	}
	if _, ok := b.Mutator("c.three"); ok {
		t.Error("Mutator of a name the bundle does not export")
	}
	if o := b.Options(); o.CPUBudget != bundle.DefaultCPUBudget || o.MemoryBudget != bundle.DefaultMemoryBudget || o.MaxBundleBytes != bundle.DefaultMaxBundleBytes {
		t.Errorf("defaults %+v", o)
	}
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("lib.ts", `export function title(s: string): string { return s.trim(); }`)
	write("main.ts", `import { title } from "./lib";
export default { "n.set": (tx: any, args: {name: string}) => { tx.setScalar("name", title(args.name)); } };`)
	src, err := bundle.Build(filepath.Join(dir, "main.ts"))
	if err != nil {
		t.Fatal(err)
	}
	b := compile(t, string(src), bundle.Options{})
	w := newWorld(t, b)
	if o := w.do("c", "n.set", `{"name":"  Roadmap "}`); o.Status != "applied" {
		t.Fatalf("%+v", o)
	}
	h, _ := w.state.Head("acme", "p", "main")
	if got := string(h.Scalars["name"]); got != `"Roadmap"` {
		t.Errorf("name = %s", got)
	}

	write("bad.ts", "import { nope } from \"./missing\";\nexport default { nope };")
	_, err = bundle.Build(filepath.Join(dir, "bad.ts"))
	if err == nil || !strings.Contains(err.Error(), `bad.ts:1:22: Could not resolve "./missing"`) {
		t.Errorf("build of a missing import: %v", err)
	}
}

// A bundle dropped without Close frees its engine instances when the
// garbage collector finds it.
func TestDroppedBundleFreesEngines(t *testing.T) {
	src := []byte(`export default {"a.b": () => {}};`)
	before := bundle.LiveEngines()
	for range 10 {
		if _, err := bundle.Compile(src, bundle.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	// Cleanups run on a goroutine of their own: wait for them.
	for deadline := time.Now().Add(10 * time.Second); bundle.LiveEngines() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d engines of dropped bundles still live", bundle.LiveEngines()-before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	b := compile(t, string(src), bundle.Options{})
	b.Close()
	if n := bundle.LiveEngines() - before; n != 0 {
		t.Errorf("%d engines live after Close", n)
	}
}
