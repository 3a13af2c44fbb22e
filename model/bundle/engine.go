package bundle

import (
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
	for name, fn := range map[string]quickjs.HostFunc{
		"__canon_get":        v.hostGet,
		"__canon_put":        v.hostPut,
		"__canon_delete":     v.hostDelete,
		"__canon_scalar":     v.hostScalar,
		"__canon_set_scalar": v.hostSetScalar,
		"__canon_charge":     v.hostCharge,
		"__canon_mutation":   v.hostMutation,
	} {
		if err := js.RegisterHostFunc(name, fn); err != nil {
			return nil, fmt.Errorf("start JavaScript engine: %w", err)
		}
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
		// The runtime may allocate through the meter's functions while it
		// frees itself: the meter goes after it.
		v.js.Close()
		v.js = nil
		liveEngines.Add(-1)
	}
	v.m, v.meter = nil, 0
}

// The host functions answer the prelude in the small string protocol it
// documents: "V" + JSON, "N", "T"/"F", "" or "E" + {"code","message"}.

func (v *vm) hostError(err error) (any, error) {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{model.ErrorCode(err), err.Error()})
	return "E" + string(b), nil
}

func (v *vm) live() error {
	if v.tx == nil {
		return errors.New("the tx is used after its mutator returned")
	}
	return nil
}

func strArgs(args []any, n int) ([]string, error) {
	if len(args) != n {
		return nil, fmt.Errorf("%d arguments, want %d", len(args), n)
	}
	out := make([]string, n)
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("argument %d is %T, not a string", i, a)
		}
		out[i] = s
	}
	return out, nil
}

// hostCharge adds the steps a built-in is about to take in native code to
// the CPU budget; "over" when that exceeds it.
func (v *vm) hostCharge(args []any) (any, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%d arguments, want 1", len(args))
	}
	var n float64
	switch x := args[0].(type) {
	case int:
		n = float64(x)
	case float64:
		n = x
	default:
		return nil, fmt.Errorf("argument is %T, not a number", x)
	}
	m := (*meter)(cptr(v.meter))
	m.charged += int64(n/tickInterval) + 1
	if m.polls+m.charged > m.maxPolls {
		return "over", nil
	}
	return "", nil
}

// hostMutation answers tx.mutation's first read: the JSON of the
// mutation view. It is read only while the mutation's JavaScript runs
// (its jobs included), when v.tx is set.
func (v *vm) hostMutation(args []any) (any, error) {
	if len(args) != 0 {
		return nil, fmt.Errorf("%d arguments, want 0", len(args))
	}
	if v.tx == nil {
		return nil, errors.New("tx.mutation is read outside a mutation")
	}
	m := v.tx.Mutation()
	b, err := json.Marshal(mutationView{m.Org, m.Project, m.Branch, m.ClientGroup, m.Client, m.ID, m.Name})
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func (v *vm) hostGet(args []any) (any, error) {
	a, err := strArgs(args, 2)
	if err != nil {
		return nil, err
	}
	if err := v.live(); err != nil {
		return v.hostError(err)
	}
	it, err := v.tx.Get(a[0], a[1])
	if errors.Is(err, model.ErrNotFound) {
		return "N", nil
	}
	if err != nil {
		return v.hostError(err)
	}
	var b strings.Builder
	b.Grow(len(it.Data) + len(it.Meta) + 20)
	b.WriteString(`V{"data":`)
	b.Write(it.Data)
	b.WriteString(`,"meta":`)
	if len(it.Meta) == 0 {
		b.WriteString("{}")
	} else {
		b.Write(it.Meta)
	}
	b.WriteString("}")
	return b.String(), nil
}

func (v *vm) hostPut(args []any) (any, error) {
	a, err := strArgs(args, 4)
	if err != nil {
		return nil, err
	}
	if err := v.live(); err != nil {
		return v.hostError(err)
	}
	it := model.Item{Data: json.RawMessage(a[2])}
	if a[3] != "" {
		it.Meta = json.RawMessage(a[3])
	}
	if err := v.tx.Put(a[0], a[1], it); err != nil {
		return v.hostError(err)
	}
	return "", nil
}

func (v *vm) hostDelete(args []any) (any, error) {
	a, err := strArgs(args, 2)
	if err != nil {
		return nil, err
	}
	if err := v.live(); err != nil {
		return v.hostError(err)
	}
	err = v.tx.Delete(a[0], a[1])
	if errors.Is(err, model.ErrNotFound) {
		return "F", nil
	}
	if err != nil {
		return v.hostError(err)
	}
	return "T", nil
}

func (v *vm) hostScalar(args []any) (any, error) {
	a, err := strArgs(args, 1)
	if err != nil {
		return nil, err
	}
	if err := v.live(); err != nil {
		return v.hostError(err)
	}
	s, ok := v.tx.Scalar(a[0])
	if !ok {
		return "N", nil
	}
	return "V" + string(s), nil
}

func (v *vm) hostSetScalar(args []any) (any, error) {
	a, err := strArgs(args, 2)
	if err != nil {
		return nil, err
	}
	if err := v.live(); err != nil {
		return v.hostError(err)
	}
	if err := v.tx.SetScalar(a[0], json.RawMessage(a[1])); err != nil {
		return v.hostError(err)
	}
	return "", nil
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
