package bundle

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/libquickjs"
	"modernc.org/quickjs"

	"github.com/canon-sync/canon/model"
)

//go:embed prelude.js
var prelude string

// tickInterval is how many interpreter ticks (function calls and loop
// back-edges) QuickJS counts down between two calls of the interrupt
// handler: the CPU budget is enforced in units of it.
const tickInterval = lib.MJS_INTERRUPT_COUNTER_INIT

// meter is the state of the interrupt handler and the allocator
// functions, which get it as a uintptr. The fields are read and written by
// the VM's own goroutine only, while it runs JavaScript.
type meter struct {
	polls     int64 // handler calls since the budget was armed
	maxPolls  int64 // the budget, in handler calls
	charged   int64 // steps built-ins charged (__canon_charge), in handler calls
	exceeded  int32 // set when polls went over maxPolls
	_         int32
	theirFlag uintptr // the quickjs package's interrupt flag, to stop a job drain
	// oom is set when the engine's allocator refused memory: the memory
	// budget was hit, whatever the JavaScript code made of the error
	// (with no memory left, QuickJS may even throw null).
	oom int32
	_   int32
	// malloc and realloc are the engine's own allocator functions, which
	// enforce its memory limit; trackedMalloc and trackedRealloc wrap them.
	malloc, realloc uintptr
	// vm is the VM the host functions serve (hostCall finds it through
	// the allocator state's opaque pointer, which points to the meter).
	vm *vm
}

// vm is one QuickJS instance with the sandbox and the bundle loaded. It
// runs one mutation at a time.
type vm struct {
	js    *quickjs.VM
	tls   *libc.TLS
	rt    uintptr // JSRuntime*
	ctx   uintptr // JSContext*
	m     *meter
	meter uintptr // m, for the engine
	// theirFlag is the quickjs package's own interrupt flag.
	theirFlag uintptr
	tx        model.Tx
	// run, settle and names are the sandbox's entry points (prelude.js),
	// set when entries.
	run, settle, names quickjs.Value
	entries            bool
	// broken is set when the VM must not be reused: a budget was hit, or
	// a job drain was cut short.
	broken bool
	// panicked is what a host function panicked with: the mutation's
	// JavaScript was stopped, and the panic goes on from Bundle.call.
	panicked any
	// atomMessage and atomCode name the properties of a host error.
	atomMessage, atomCode lib.TJSAtom
	atoms                 bool
}

// interruptHandler is QuickJS's interrupt callback (JS_SetInterruptHandler):
// it runs every tickInterval ticks, which makes the CPU budget a count of
// ticks, the same on every machine and every replay.
func interruptHandler(_ *libc.TLS, _, opaque uintptr) int32 {
	m := (*meter)(cptr(opaque))
	m.polls++
	if m.polls+m.charged > m.maxPolls {
		m.exceeded = 1
		if m.theirFlag != 0 {
			atomic.StoreInt32((*int32)(cptr(m.theirFlag)), 1)
		}
		return 1
	}
	return 0
}

var interruptHandlerFunc = interruptHandler

// trackedMalloc and trackedRealloc are the engine's allocator functions
// (JSMallocFunctions) wrapped to note a refusal in the meter, which the
// allocator state's opaque pointer (unused by the default allocator)
// points to.
func trackedMalloc(tls *libc.TLS, s uintptr, size libc.Tsize_t) uintptr {
	m := (*meter)(cptr((*lib.TJSMallocState)(cptr(s)).Fopaque))
	p := callMalloc(m.malloc, tls, s, size)
	if p == 0 {
		m.oom = 1
	}
	return p
}

func trackedRealloc(tls *libc.TLS, s, ptr uintptr, size libc.Tsize_t) uintptr {
	m := (*meter)(cptr((*lib.TJSMallocState)(cptr(s)).Fopaque))
	p := callRealloc(m.realloc, tls, s, ptr, size)
	if p == 0 && size != 0 {
		m.oom = 1
	}
	return p
}

// callMalloc and callRealloc call a function pointer of the transpiled
// engine, as its own code does.
func callMalloc(fn uintptr, tls *libc.TLS, s uintptr, size libc.Tsize_t) uintptr {
	return (*(*func(*libc.TLS, uintptr, libc.Tsize_t) uintptr)(unsafe.Pointer(&struct{ uintptr }{fn})))(tls, s, size)
}

func callRealloc(fn uintptr, tls *libc.TLS, s, ptr uintptr, size libc.Tsize_t) uintptr {
	return (*(*func(*libc.TLS, uintptr, uintptr, libc.Tsize_t) uintptr)(unsafe.Pointer(&struct{ uintptr }{fn})))(tls, s, ptr, size)
}

var (
	trackedMallocFunc  = trackedMalloc
	trackedReallocFunc = trackedRealloc
	mallocPtr          = *(*uintptr)(unsafe.Pointer(&trackedMallocFunc))
	reallocPtr         = *(*uintptr)(unsafe.Pointer(&trackedReallocFunc))
)

// handlerPtr is the handler as the C function pointer the transpiled
// engine calls: a pointer to the Go func value (what quickjs's own fp does).
var handlerPtr = *(*uintptr)(unsafe.Pointer(&interruptHandlerFunc))

// liveEngines counts the engine instances not closed yet (tests read it).
var liveEngines atomic.Int64

// cptr turns an address the engine holds into a pointer: C memory the
// engine allocated (never moved or collected by Go), or a meter its vm
// keeps alive.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// newVM makes a VM for a compiled bundle: the host functions, the bundle's
// loader, the sandbox prelude, everything frozen.
func newVM(loader string, opts Options) (_ *vm, err error) {
	js, err := quickjs.NewVM()
	if err != nil {
		return nil, fmt.Errorf("start JavaScript engine: %w", err)
	}
	v := &vm{js: js}
	liveEngines.Add(1)
	defer func() {
		if err != nil {
			v.close()
		}
	}()
	if err := v.internals(); err != nil {
		return nil, err
	}
	// The meter is Go memory the engine knows by address: Go's collector
	// does not move objects, and v.m keeps it alive as long as the engine.
	v.m = new(meter)
	v.meter = uintptr(unsafe.Pointer(v.m))
	lib.XJS_SetInterruptHandler(v.tls, v.rt, handlerPtr, v.meter)
	mc := &(*lib.TJSRuntime)(cptr(v.rt)).Fmalloc_ctx
	m := (*meter)(cptr(v.meter))
	m.malloc, m.realloc = mc.Fmf.Fjs_malloc, mc.Fmf.Fjs_realloc
	mc.Fmalloc_state.Fopaque = v.meter
	mc.Fmf.Fjs_malloc, mc.Fmf.Fjs_realloc = mallocPtr, reallocPtr
	m.vm = v
	if err := v.defineHost(); err != nil {
		return nil, fmt.Errorf("start JavaScript engine: %w", err)
	}
	v.arm(opts)
	if _, err := js.Eval(loader, quickjs.EvalGlobal); err != nil {
		return nil, v.budgetErr(err, opts, "loading the bundle")
	}
	// The sandbox's own start does not count against the bundle's budgets.
	sandbox := Options{CPUBudget: DefaultCPUBudget, MemoryBudget: DefaultMemoryBudget}
	v.arm(sandbox)
	entries, err := js.EvalValue(prelude, quickjs.EvalGlobal)
	if err != nil {
		return nil, v.budgetErr(err, sandbox, "starting the sandbox")
	}
	defer entries.Free()
	var got []quickjs.Value
	for _, name := range []string{"run", "settle", "names"} {
		atom, err := js.NewAtom(name)
		if err == nil {
			var fn quickjs.Value
			if fn, err = entries.GetPropertyValue(atom); err == nil {
				got = append(got, fn)
				continue
			}
		}
		for _, fn := range got {
			fn.Free()
		}
		return nil, fmt.Errorf("start JavaScript engine: %w", err)
	}
	v.run, v.settle, v.names = got[0], got[1], got[2]
	v.entries = true
	return v, nil
}

// internals reads the engine pointers the quickjs package keeps to
// itself: the interrupt handler and the memory limit are set on them.
// go.mod pins the version whose layout this reads; the test of the CPU
// budget fails if a new version changes it.
func (v *vm) internals() error {
	s := reflect.ValueOf(v.js).Elem()
	ctx := s.FieldByName("cContext")
	rt := s.FieldByName("runtime")
	their := s.FieldByName("interruptData")
	if !ctx.IsValid() || !rt.IsValid() || !their.IsValid() || rt.Kind() != reflect.Pointer {
		return errors.New("start JavaScript engine: this version of modernc.org/quickjs is not the one the sandbox was written for")
	}
	r := rt.Elem()
	crt, tls := r.FieldByName("cRuntime"), r.FieldByName("tls")
	if !crt.IsValid() || !tls.IsValid() || tls.Kind() != reflect.Pointer {
		return errors.New("start JavaScript engine: this version of modernc.org/quickjs is not the one the sandbox was written for")
	}
	v.ctx = uintptr(ctx.Uint())
	v.rt = uintptr(crt.Uint())
	v.tls = (*libc.TLS)(tls.UnsafePointer())
	v.theirFlag = uintptr(their.Uint())
	return nil
}

// arm starts the budgets of one run: the tick count from zero, the memory
// limit the VM's current use plus the budget (so garbage an earlier
// mutation left does not count against this one).
func (v *vm) arm(opts Options) {
	m := (*meter)(cptr(v.meter))
	m.polls, m.charged, m.exceeded, m.oom = 0, 0, 0, 0
	m.maxPolls = max(opts.CPUBudget/tickInterval, 1)
	m.theirFlag = v.theirFlag
	(*lib.TJSContext)(cptr(v.ctx)).Finterrupt_counter = tickInterval
	rt := (*lib.TJSRuntime)(cptr(v.rt))
	used := int64(rt.Fmalloc_ctx.Fmalloc_state.Fmalloc_size)
	lib.XJS_SetMemoryLimit(v.tls, v.rt, libc.Tsize_t(used+opts.MemoryBudget))
}

// repanic goes on with the panic of a host function, which stopped the
// JavaScript that called it: the VM is not reused.
func (v *vm) repanic() {
	if p := v.panicked; p != nil {
		v.panicked, v.broken = nil, true
		panic(p)
	}
}

func (v *vm) overCPU() bool { return (*meter)(cptr(v.meter)).exceeded != 0 }

func (v *vm) overMemory() bool { return (*meter)(cptr(v.meter)).oom != 0 }

// budgetErr turns an engine error into the error of a budget that was
// exceeded, or wraps it.
func (v *vm) budgetErr(err error, opts Options, doing string) error {
	switch {
	case v.overCPU():
		v.broken = true
		return model.WithCode(CodeBudgetExceeded, fmt.Errorf("%s ran over the CPU budget of %d steps (--mutator-cpu-budget): an endless loop?", doing, opts.CPUBudget))
	case v.overMemory() || isOOM(err):
		v.broken = true
		return model.WithCode(CodeBudgetExceeded, fmt.Errorf("%s ran over the memory budget of %s (--mutator-memory-budget)", doing, bytesString(opts.MemoryBudget)))
	}
	return fmt.Errorf("%s: %w", doing, err)
}

func isOOM(err error) bool {
	var je *quickjs.Error
	if errors.As(err, &je) {
		return je.Name == "InternalError" && je.Message == "out of memory"
	}
	return err != nil && strings.Contains(err.Error(), "out of memory")
}

func bytesString(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

func (v *vm) close() {
	if v.js != nil {
		if v.entries {
			v.run.Free()
			v.settle.Free()
			v.names.Free()
		}
		if v.atoms {
			lib.XJS_FreeAtom(v.tls, v.ctx, v.atomMessage)
			lib.XJS_FreeAtom(v.tls, v.ctx, v.atomCode)
		}
		// The runtime may allocate through the meter's functions while it
		// frees itself: the meter goes after it.
		v.js.Close()
		v.js = nil
		liveEngines.Add(-1)
	}
	v.m, v.meter = nil, 0
}

// The host functions are one C function of the engine, hostCall, told
// apart by its magic number: no reflection, no conversion of arguments to
// Go values but the strings read, and an item reaches the VM as the
// engine's own parse of its JSON. The prelude (the only caller: the
// functions are gone from the global object before a bundle runs) passes
// strings it checked, and a number to charge. They answer a value, null
// for none, and throw an Error with a code for a failure.
const (
	hostGet = iota
	hostHas
	hostPut
	hostDelete
	hostScalar
	hostSetScalar
	hostCharge
	hostMutation
)

// hostFuncs are the global names (NUL-terminated for the engine) and
// argument counts of the host functions; the index is the magic number.
var hostFuncs = [...]struct {
	name string
	args int32
}{
	hostGet:       {"__canon_get\x00", 2},
	hostHas:       {"__canon_has\x00", 2},
	hostPut:       {"__canon_put\x00", 4},
	hostDelete:    {"__canon_delete\x00", 2},
	hostScalar:    {"__canon_scalar\x00", 1},
	hostSetScalar: {"__canon_set_scalar\x00", 2},
	hostCharge:    {"__canon_charge\x00", 1},
	hostMutation:  {"__canon_mutation\x00", 0},
}

var (
	hostCallFunc = hostCall
	hostCallPtr  = *(*uintptr)(unsafe.Pointer(&hostCallFunc))
)

// cString is a NUL-terminated Go string constant as the engine reads it:
// static data, never moved or collected.
func cString(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }

// defineHost makes the host functions global functions, and the names
// of the properties of the errors they throw.
func (v *vm) defineHost() error {
	tls, ctx := v.tls, v.ctx
	v.atomMessage = lib.XJS_NewAtom(tls, ctx, cString("message\x00"))
	v.atomCode = lib.XJS_NewAtom(tls, ctx, cString("code\x00"))
	v.atoms = true
	global := lib.XJS_GetGlobalObject(tls, ctx)
	defer lib.XFreeValue(tls, ctx, global)
	for op, f := range hostFuncs {
		fn := lib.XJS_NewCFunction2(tls, ctx, hostCallPtr, cString(f.name), f.args, lib.EJS_CFUNC_generic_magic, int32(op))
		// JS_DefinePropertyValueStr takes fn over, also when it fails.
		if lib.XJS_DefinePropertyValueStr(tls, ctx, global, cString(f.name), fn, lib.MJS_PROP_WRITABLE|lib.MJS_PROP_CONFIGURABLE) < 0 {
			return fmt.Errorf("define host function %s", strings.TrimSuffix(f.name, "\x00"))
		}
	}
	return nil
}

// hostCall is the engine's C function (JSCFunctionMagic) of every host
// function. A Go panic under it (a broken Reader, say) must not go up
// through the engine: it stops the mutation's JavaScript with an error no
// catch sees, and goes on from Bundle.call.
func hostCall(tls *libc.TLS, ctx uintptr, _ lib.TJSValue, argc int32, argv uintptr, magic int32) (r lib.TJSValue) {
	rt := (*lib.TJSRuntime)(cptr(lib.XJS_GetRuntime(tls, ctx)))
	v := (*meter)(cptr(rt.Fmalloc_ctx.Fmalloc_state.Fopaque)).vm
	returned := false
	defer func() {
		if returned {
			return
		}
		v.broken = true
		p := recover()
		if p == nil {
			return // runtime.Goexit, which goes on: the VM is not reused
		}
		v.panicked = p
		r = v.throw(model.CodeMutator, "the mutation was stopped: a host function panicked")
		lib.XJS_SetUncatchableException(tls, ctx, 1)
	}()
	r = v.host(magic, argv)
	returned = true
	return r
}

// arg is the i-th argument of a host call. The engine passes at least as
// many as the function's declared count, undefined for the missing ones.
func arg(argv uintptr, i int) lib.TJSValue {
	return *(*lib.TJSValue)(cptr(argv + uintptr(i)*sizeofValue))
}

var sizeofValue = unsafe.Sizeof(*new(lib.TJSValue))

func (v *vm) host(op int32, argv uintptr) lib.TJSValue {
	if op == hostCharge {
		return v.charge(arg(argv, 0))
	}
	if v.tx == nil {
		if op == hostMutation {
			return v.throw(model.CodeMutator, "tx.mutation is read outside a mutation")
		}
		return v.throw(model.CodeMutator, "the tx is used after its mutator returned")
	}
	var a [4][]byte // JSON texts are used as they are, names as strings
	var s [4]string
	for i := range hostFuncs[op].args {
		var ok bool
		if a[i], ok = v.goBytes(arg(argv, int(i))); !ok {
			return jsException
		}
		if op != hostPut || i < 2 {
			s[i] = string(a[i])
		}
	}
	switch op {
	case hostGet, hostHas:
		it, err := v.tx.Get(s[0], s[1])
		switch {
		case errors.Is(err, model.ErrNotFound):
			if op == hostHas {
				return jsFalse
			}
			return jsNull
		case err != nil:
			return v.throwErr(err)
		case op == hostHas:
			return jsTrue
		}
		meta := []byte(it.Meta)
		if len(meta) == 0 {
			meta = []byte("{}")
		}
		return v.parseJSON([]byte(`{"data":`), it.Data, []byte(`,"meta":`), meta, []byte("}"))
	case hostPut:
		it := model.Item{Data: a[2]}
		if len(a[3]) > 0 {
			it.Meta = a[3]
		}
		if err := v.tx.Put(s[0], s[1], it); err != nil {
			return v.throwErr(err)
		}
		return jsNull
	case hostDelete:
		err := v.tx.Delete(s[0], s[1])
		switch {
		case errors.Is(err, model.ErrNotFound):
			return jsFalse
		case err != nil:
			return v.throwErr(err)
		}
		return jsTrue
	case hostScalar:
		sc, ok := v.tx.Scalar(s[0])
		if !ok {
			return jsNull
		}
		return v.parseJSON(sc)
	case hostSetScalar:
		if err := v.tx.SetScalar(s[0], a[1]); err != nil {
			return v.throwErr(err)
		}
		return jsNull
	case hostMutation:
		m := v.tx.Mutation()
		b, err := json.Marshal(mutationView{m.Org, m.Project, m.Branch, m.ClientGroup, m.Client, m.ID, m.Name})
		if err != nil {
			return v.throwErr(err)
		}
		return v.parseJSON(b)
	}
	return v.throw(model.CodeMutator, fmt.Sprintf("no host function %d", op))
}

// charge adds the steps a built-in is about to take in native code to
// the CPU budget; true when that exceeds it.
func (v *vm) charge(val lib.TJSValue) lib.TJSValue {
	p := v.tls.Alloc(8)
	defer v.tls.Free(8)
	if lib.XJS_ToFloat64(v.tls, v.ctx, p, val) < 0 {
		return jsException
	}
	n := *(*float64)(cptr(p))
	m := v.m
	m.charged += int64(n/tickInterval) + 1
	if m.polls+m.charged > m.maxPolls {
		return jsTrue
	}
	return jsFalse
}

// goBytes reads a string argument as UTF-8 (lone surrogates as U+FFFD,
// as the quickjs package reads them); false when the engine threw (out
// of memory).
func (v *vm) goBytes(val lib.TJSValue) ([]byte, bool) {
	plen := v.tls.Alloc(int(unsafe.Sizeof(libc.Tsize_t(0))))
	defer v.tls.Free(int(unsafe.Sizeof(libc.Tsize_t(0))))
	p := lib.XJS_ToCStringLen2(v.tls, v.ctx, plen, val, 0)
	if p == 0 {
		return nil, false
	}
	defer lib.XJS_FreeCString(v.tls, v.ctx, p)
	return wellFormed(unsafe.Slice((*byte)(cptr(p)), *(*libc.Tsize_t)(cptr(plen)))), true
}

// wellFormed copies UTF-8 the engine wrote into Go memory with U+FFFD
// for each lone surrogate, which the engine writes as the three bytes of
// its code point (0xED 0xA0-0xBF 0x80-0xBF), as the quickjs package's
// strings do. In valid UTF-8, 0xED is never followed by a byte above
// 0x9F, and U+FFFD takes three bytes too.
func wellFormed(b []byte) []byte {
	out := bytes.Clone(b)
	if out == nil {
		out = []byte{}
	}
	for i := 0; ; {
		j := bytes.IndexByte(out[i:], 0xed)
		if j < 0 || i+j+2 >= len(out) {
			break
		}
		i += j
		if out[i+1] < 0xa0 {
			i++
			continue
		}
		copy(out[i:], "\uFFFD")
		i += 3
	}
	return out
}

// parseJSON makes the JavaScript value of the JSON text in parts, put
// together, with the engine's parser; the exception when it threw.
func (v *vm) parseJSON(parts ...[]byte) lib.TJSValue {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	buf := libc.Xmalloc(v.tls, libc.Tsize_t(n+1))
	if buf == 0 {
		return v.throw(CodeBudgetExceeded, "out of memory")
	}
	defer libc.Xfree(v.tls, buf)
	dst := unsafe.Slice((*byte)(cptr(buf)), n+1)
	at := 0
	for _, p := range parts {
		at += copy(dst[at:], p)
	}
	dst[n] = 0
	return lib.XJS_ParseJSON(v.tls, v.ctx, buf, libc.Tsize_t(n), cString("<host>\x00"))
}

// newString makes a JavaScript string of Go text.
func (v *vm) newString(s string) lib.TJSValue {
	s = strings.ToValidUTF8(s, "\uFFFD")
	buf := libc.Xmalloc(v.tls, libc.Tsize_t(max(len(s), 1)))
	if buf == 0 {
		return jsException
	}
	defer libc.Xfree(v.tls, buf)
	copy(unsafe.Slice((*byte)(cptr(buf)), len(s)), s)
	return lib.XJS_NewStringLen(v.tls, v.ctx, buf, libc.Tsize_t(len(s)))
}

// throw throws an Error with message and code, as the prelude's fail
// makes them, and returns the exception.
func (v *vm) throw(code, message string) lib.TJSValue {
	tls, ctx := v.tls, v.ctx
	e := lib.XJS_NewError(tls, ctx)
	// JS_DefinePropertyValue takes the value over, also when it fails
	// (out of memory, which the memory budget reports).
	lib.XJS_DefinePropertyValue(tls, ctx, e, v.atomMessage, v.newString(message), lib.MJS_PROP_WRITABLE|lib.MJS_PROP_CONFIGURABLE)
	lib.XJS_DefinePropertyValue(tls, ctx, e, v.atomCode, v.newString(code), lib.MJS_PROP_C_W_E)
	return lib.XJS_Throw(tls, ctx, e)
}

func (v *vm) throwErr(err error) lib.TJSValue {
	return v.throw(model.ErrorCode(err), err.Error())
}

// outcome is what __canon_run or __canon_settle answered.
func outcome(r any) (pending bool, err error) {
	s, _ := r.(string)
	switch {
	case s == "":
		return false, nil
	case s == "P":
		return true, nil
	case s[0] == 'E':
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if jerr := json.Unmarshal([]byte(s[1:]), &e); jerr != nil {
			return false, fmt.Errorf("the sandbox answered %q: %w", s, jerr)
		}
		if e.Code == "" {
			e.Code = model.CodeMutator
		}
		return false, model.WithCode(e.Code, errors.New(e.Message))
	}
	return false, fmt.Errorf("the sandbox answered %q", s)
}
