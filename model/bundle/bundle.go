// Package bundle runs mutators written in JavaScript (or TypeScript
// compiled to it): a bundle is one ES module whose default export (or
// export mutators) maps mutator names to functions (tx, args) => void.
// Compile validates a bundle once; its Mutator functions run it in an
// embedded QuickJS engine (modernc.org/quickjs, pure Go, no cgo) inside a
// sandbox: no clock but tx.now(), no randomness, no I/O, no timers, and a
// CPU and a memory budget per mutation. docs/mutators.md describes the
// contract ("Mutators in JavaScript and TypeScript").
//
// The package is pure: it does no I/O, except Build, which reads the
// files of the bundle it builds.
package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/evanw/esbuild/pkg/api"
	lib "modernc.org/libquickjs"
	"modernc.org/quickjs"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// CodeBudgetExceeded is the error code of a mutation that ran over its
// CPU or memory budget.
const CodeBudgetExceeded = model.CodeBudgetExceeded

// Defaults of Options.
const (
	// DefaultCPUBudget is 20 million interpreter steps: 10 million
	// iterations of a tight loop, about 0.5 s (BenchmarkSteps), where a
	// todo mutator takes a few hundred steps.
	DefaultCPUBudget = 20_000_000
	// DefaultMemoryBudget is 64 MiB of JavaScript heap per mutation.
	DefaultMemoryBudget = 64 << 20
	// DefaultMaxBundleBytes is 1 MiB of bundle source.
	DefaultMaxBundleBytes = 1 << 20
)

// Options bound what a bundle may do; zero fields take the documented
// defaults. The same bundle must run with the same budgets wherever its
// decisions are replayed: a budget is part of what decides.
type Options struct {
	// CPUBudget is the number of interpreter steps (jumps, function calls
	// and regexp backtracking, counted by QuickJS's interrupt counter, so
	// a plain loop's iteration is 2 steps; plus the elements the array
	// built-ins walk) one mutation
	// may take, enforced in units of 10000 steps; loading the bundle has
	// a budget of its own of the same size. It counts steps, not time, so
	// a mutation decides the same on every machine and every replay.
	// Default DefaultCPUBudget.
	CPUBudget int64
	// MemoryBudget is the bytes of JavaScript heap one mutation may
	// allocate on top of what the loaded bundle holds. Default
	// DefaultMemoryBudget.
	MemoryBudget int64
	// MaxBundleBytes is the largest bundle Compile accepts. Default
	// DefaultMaxBundleBytes.
	MaxBundleBytes int
}

// Smallest budgets Options accepts: below them the engine cannot even
// report that a budget was exceeded.
const (
	MinCPUBudget    = 10_000
	MinMemoryBudget = 256 << 10
)

func (o Options) withDefaults() (Options, error) {
	if o.CPUBudget == 0 {
		o.CPUBudget = DefaultCPUBudget
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	if o.MaxBundleBytes == 0 {
		o.MaxBundleBytes = DefaultMaxBundleBytes
	}
	switch {
	case o.CPUBudget < MinCPUBudget:
		return o, fmt.Errorf("mutator CPU budget of %d steps: it must be at least %d (--mutator-cpu-budget)", o.CPUBudget, MinCPUBudget)
	case o.MemoryBudget < MinMemoryBudget:
		return o, fmt.Errorf("mutator memory budget of %d bytes: it must be at least %d (256 KiB) (--mutator-memory-budget)", o.MemoryBudget, MinMemoryBudget)
	case o.MaxBundleBytes < 0:
		return o, fmt.Errorf("mutator bundle size limit of %d bytes: it must be positive", o.MaxBundleBytes)
	}
	return o, nil
}

// Bundle is a compiled bundle. Its mutators are safe for concurrent use:
// each call takes an engine instance of its own from a pool.
type Bundle struct {
	src    []byte
	hash   string
	names  []string
	opts   Options
	loader string
	pool   *pool
}

// Errors of Compile; the messages say what to fix. Test with errors.Is.
var (
	// ErrInvalidBundle: the bundle does not parse, imports something, does
	// not export mutators, exports a bad name or member, or throws while
	// it loads.
	ErrInvalidBundle = errors.New("invalid mutator bundle")
	// ErrBundleTooLarge: the bundle is over Options.MaxBundleBytes.
	ErrBundleTooLarge = errors.New("mutator bundle too large")
)

// Builtin mutator names, which a bundle cannot define.
var builtins = []string{model.ItemPut, model.ItemPatch, model.ItemDelete, model.ItemSplice, model.ProjectSet}

// loaderName is the global function that instantiates the bundle afresh.
const loaderName = "__canon_load"

// Compile checks a bundle: its size, that it parses as an ES module that
// imports nothing, that it loads (without throwing, within the budgets)
// and that it exports an object of valid mutator names to functions. Any
// failure of the bundle is an error that wraps ErrInvalidBundle or
// ErrBundleTooLarge; budgets under their minimum are an error too.
func Compile(src []byte, opts Options) (*Bundle, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(src) > opts.MaxBundleBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d bytes: minify it (esbuild --minify) or raise the limit",
			ErrBundleTooLarge, len(src), opts.MaxBundleBytes)
	}
	loader, err := transform(src)
	if err != nil {
		return nil, err
	}
	b := &Bundle{src: slices.Clone(src), opts: opts, loader: loader}
	sum := sha256.Sum256(src)
	b.hash = hex.EncodeToString(sum[:])

	v, err := newVM(loader, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	v.arm(opts)
	r, err := v.names.Call(quickjs.UndefinedValue)
	if err != nil {
		err = v.budgetErr(err, opts, "loading the bundle")
		v.close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	s, _ := r.(string)
	if strings.HasPrefix(s, "E") {
		_, err := outcome(s)
		if err = memoryErr(v, err, opts, "loading the bundle"); model.ErrorCode(err) != CodeBudgetExceeded {
			err = fmt.Errorf("loading the bundle: %w", err)
		}
		v.close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	var members [][2]string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(s, "V")), &members); err != nil {
		v.close()
		return nil, fmt.Errorf("%w: list the exports: %w", ErrInvalidBundle, err)
	}
	if err := checkMembers(members); err != nil {
		v.close()
		return nil, err
	}
	for _, m := range members {
		b.names = append(b.names, m[0])
	}
	slices.Sort(b.names)
	b.pool = newPool(loader, opts)
	b.pool.put(v)
	// A bundle dropped without Close frees its engines when collected:
	// its mutators hold it, so none of them can be running then.
	runtime.AddCleanup(b, func(p *pool) { p.drain() }, b.pool)
	return b, nil
}

func checkMembers(members [][2]string) error {
	if len(members) == 0 {
		return fmt.Errorf("%w: the exported mutators object is empty: give it at least one mutator", ErrInvalidBundle)
	}
	for _, m := range members {
		name, kind := m[0], m[1]
		if err := schemas.ValidateMutatorName("mutator", name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidBundle, err)
		}
		if slices.Contains(builtins, name) {
			return fmt.Errorf("%w: mutator %q is a built-in: give yours another name", ErrInvalidBundle, name)
		}
		for _, p := range model.ReservedPrefixes {
			if strings.HasPrefix(name, p) {
				return fmt.Errorf("%w: mutator %q: the prefix %q is reserved for Canon's system mutators", ErrInvalidBundle, name, p)
			}
		}
		if kind != "function" {
			return fmt.Errorf("%w: mutator %q is a %s, not a function (tx, args) => void", ErrInvalidBundle, name, kind)
		}
	}
	return nil
}

// transform turns the ES module into the source of a global loader
// function that returns the module's exports, instantiated afresh by each
// call. It refuses imports: a bundle is one self-contained module.
func transform(src []byte) (string, error) {
	res := api.Build(api.BuildOptions{
		Stdin: &api.StdinOptions{
			Contents:   string(src),
			Sourcefile: "bundle.js",
			Loader:     api.LoaderJS,
		},
		Bundle:     true,
		Write:      false,
		Format:     api.FormatIIFE,
		GlobalName: "__canon_exports",
		Target:     api.ES2020,
		Platform:   api.PlatformNeutral,
		LogLevel:   api.LogLevelSilent,
		Charset:    api.CharsetUTF8,
		Plugins: []api.Plugin{{
			Name: "no-imports",
			Setup: func(pb api.PluginBuild) {
				pb.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
					return api.OnResolveResult{}, fmt.Errorf("the bundle imports %q: a bundle must be one self-contained module; bundle it: esbuild --bundle --format=esm FILE.ts (or canon mutators deploy FILE.ts)", a.Path)
				})
			},
		}},
	})
	if len(res.Errors) > 0 {
		return "", fmt.Errorf("%w: %s", ErrInvalidBundle, messages(res.Errors))
	}
	if len(res.OutputFiles) != 1 {
		return "", fmt.Errorf("%w: esbuild made %d files of it, want 1", ErrInvalidBundle, len(res.OutputFiles))
	}
	return "globalThis." + loaderName + " = function () {\n\"use strict\";\n" + string(res.OutputFiles[0].Contents) + "\nreturn __canon_exports;\n};\n", nil
}

// messages formats esbuild's errors as "line:col: text", the first few.
func messages(ms []api.Message) string {
	var parts []string
	for i, m := range ms {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ms)-i))
			break
		}
		text := m.Text
		if len(m.Notes) > 0 && m.PluginName != "" {
			text = m.Notes[0].Text
		}
		if m.Location != nil {
			parts = append(parts, fmt.Sprintf("%d:%d: %s", m.Location.Line, m.Location.Column+1, text))
		} else {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "; ")
}

// Hash is the lowercase hex SHA-256 of the bundle's source: the bundle
// hash versions record.
func (b *Bundle) Hash() string { return b.hash }

// Names returns the bundle's mutator names, sorted.
func (b *Bundle) Names() []string { return slices.Clone(b.names) }

// Source returns the bundle's source as it was compiled.
func (b *Bundle) Source() []byte { return slices.Clone(b.src) }

// Options returns the bundle's budgets, defaults filled in.
func (b *Bundle) Options() Options { return b.opts }

// Close frees the engine instances the bundle keeps for reuse (their
// memory is not Go's: call Close when a bundle is no longer used, or the
// garbage collector frees them some time after). Mutators called after
// Close still work, each on an instance of its own.
func (b *Bundle) Close() { b.pool.drain() }

// Mutator returns the mutator of a name, to register in a model.Registry.
// It is safe for concurrent use.
func (b *Bundle) Mutator(name string) (model.Mutator, bool) {
	if _, ok := slices.BinarySearch(b.names, name); !ok {
		return nil, false
	}
	return func(tx model.Tx, args json.RawMessage) error { return b.run(tx, name, args) }, true
}

// mutationView is tx.mutation of the contract.
type mutationView struct {
	Org         string `json:"org"`
	Project     string `json:"project"`
	Branch      string `json:"branch"`
	ClientGroup string `json:"clientGroup"`
	Client      string `json:"client"`
	ID          uint64 `json:"id"`
	Name        string `json:"name"`
}

func (b *Bundle) run(tx model.Tx, name string, args json.RawMessage) error {
	v, err := b.pool.get()
	if err != nil {
		return err
	}
	v.tx = tx
	defer func() {
		v.tx = nil
		if p := recover(); p != nil {
			// A Go panic went up through the engine, which leaves the
			// instance unusable (modernc.org/quickjs abandons it). The
			// Decider records the panic as the mutation's outcome.
			v.broken = true
			b.pool.put(v)
			panic(p)
		}
		b.pool.put(v)
	}()
	return b.call(v, name, args, tx.Now().UnixMilli())
}

func (b *Bundle) call(v *vm, name string, args json.RawMessage, now int64) error {
	v.arm(b.opts)
	doing := "mutator " + name
	r, err := v.run.Call(quickjs.UndefinedValue, name, string(args), now)
	if err != nil {
		return v.budgetErr(err, b.opts, doing)
	}
	// Run the promise jobs the mutator queued (an async mutator's
	// continuations, promises it left running) to the end now: none may
	// run in a later mutation. No job waits on anything outside (no timers,
	// no I/O), so a promise still pending then never settles.
	if lib.XJS_IsJobPending(v.tls, v.rt) != 0 {
		if _, err := v.js.ExecutePendingJobs(); err != nil {
			v.broken = true
			return v.budgetErr(err, b.opts, doing)
		}
	}
	pending, err := outcome(r)
	if pending {
		if r, err = v.settle.Call(quickjs.UndefinedValue); err != nil {
			return v.budgetErr(err, b.opts, doing)
		}
		if pending, err = outcome(r); pending {
			return fmt.Errorf("%s: its promise never settled: it awaits something that never resolves (a mutator has no timers and no I/O to wait for)", doing)
		}
	}
	return memoryErr(v, err, b.opts, doing)
}

// memoryErr names the budget of an out-of-memory error the JavaScript
// code saw (the prelude gives it the code budget_exceeded), and marks
// the VM for disposal; other errors it returns as they are.
func memoryErr(v *vm, err error, opts Options, doing string) error {
	if err == nil && !v.overMemory() {
		return nil
	}
	if v.overMemory() || model.ErrorCode(err) == CodeBudgetExceeded {
		v.broken = true
		return model.WithCode(CodeBudgetExceeded, fmt.Errorf("%s ran over the memory budget of %s (--mutator-memory-budget)", doing, bytesString(opts.MemoryBudget)))
	}
	return err
}

// pool keeps idle VMs of a bundle for reuse.
type pool struct {
	loader string
	opts   Options
	mu     sync.Mutex
	idle   []*vm
	closed bool
}

// maxIdle bounds the VMs a bundle keeps: a VM holds a few hundred KB.
const maxIdle = 8

func newPool(loader string, opts Options) *pool {
	return &pool{loader: loader, opts: opts}
}

func (p *pool) get() (*vm, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		v := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return v, nil
	}
	p.mu.Unlock()
	v, err := newVM(p.loader, p.opts)
	if err != nil {
		// Compile loaded the same bundle with the same budgets: only the
		// engine itself can fail here.
		return nil, fmt.Errorf("start a JavaScript engine for the bundle: %w", err)
	}
	return v, nil
}

func (p *pool) put(v *vm) {
	if v.broken {
		v.close()
		return
	}
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdle {
		p.idle = append(p.idle, v)
		v = nil
	}
	p.mu.Unlock()
	if v != nil {
		v.close()
	}
}

func (p *pool) drain() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, v := range idle {
		v.close()
	}
}

// Build bundles a TypeScript or JavaScript entry file and what it imports
// (relative files and packages under node_modules) into one ES module,
// the form Compile and the TypeScript client take. It reads files; it does
// not type-check (run tsc for that).
func Build(entry string) ([]byte, error) {
	return build(entry, api.BuildOptions{
		Format:        api.FormatESModule,
		Target:        api.ES2020,
		Platform:      api.PlatformNeutral,
		MainFields:    []string{"module", "main"},
		LegalComments: api.LegalCommentsNone,
	})
}

// BuildApp bundles the entry file of a web app (TypeScript, TSX or
// JavaScript) and what it imports for browsers, into one ES module with
// an inline source map: what canon dev --app serves. A tsconfig.json
// beside the entry may map package names to paths ("paths"), as an app
// in this repository maps @canon/client to the client's sources.
func BuildApp(entry string) ([]byte, error) {
	return build(entry, api.BuildOptions{
		Format:    api.FormatESModule,
		Target:    api.ES2022,
		Platform:  api.PlatformBrowser,
		Sourcemap: api.SourceMapInline,
		JSX:       api.JSXAutomatic,
	})
}

// BuildLibrary bundles a library's entry file (TypeScript or JavaScript)
// and what it imports for browsers into one minified ES module without a
// source map: what a page that has no build step of its own imports, as
// Canon's web UI imports the TypeScript client. The same sources give the
// same bytes: the build is checked into the repository and compared.
func BuildLibrary(entry string) ([]byte, error) {
	return build(entry, api.BuildOptions{
		Format:            api.FormatESModule,
		Target:            api.ES2022,
		Platform:          api.PlatformBrowser,
		MinifyWhitespace:  true,
		MinifyIdentifiers: true,
		MinifySyntax:      true,
		LegalComments:     api.LegalCommentsNone,
	})
}

// build bundles entry with what it imports into one file under opts, in
// memory, in UTF-8. Paths in the output (a comment per file) are relative
// to the entry's folder: the same bytes wherever the build runs.
func build(entry string, opts api.BuildOptions) ([]byte, error) {
	abs, err := filepath.Abs(entry)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", entry, err)
	}
	opts.EntryPoints = []string{abs}
	opts.AbsWorkingDir = filepath.Dir(abs)
	opts.Bundle = true
	opts.Write = false
	opts.Charset = api.CharsetUTF8
	opts.LogLevel = api.LogLevelSilent
	res := api.Build(opts)
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("build %s: %s", entry, fileMessages(res.Errors))
	}
	if len(res.OutputFiles) != 1 {
		return nil, fmt.Errorf("build %s: esbuild made %d files, want 1", entry, len(res.OutputFiles))
	}
	return res.OutputFiles[0].Contents, nil
}

// fileMessages formats esbuild's errors as "file:line:col: text".
func fileMessages(ms []api.Message) string {
	var parts []string
	for i, m := range ms {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ms)-i))
			break
		}
		if m.Location != nil {
			parts = append(parts, fmt.Sprintf("%s:%d:%d: %s", m.Location.File, m.Location.Line, m.Location.Column+1, m.Text))
		} else {
			parts = append(parts, m.Text)
		}
	}
	return strings.Join(parts, "; ")
}
