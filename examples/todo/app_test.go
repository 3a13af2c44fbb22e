package todo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/schemas"
)

var (
	appLine    = regexp.MustCompile(`app\s+(http://\S+/app/)#token=(\S+)`)
	appBundle  = regexp.MustCompile(`app bundle\s+([0-9a-f]{64}), active in dev/todo`)
	devStarted = regexp.MustCompile(`msg="canon dev started".* http=(\S+)`)
)

// page is one tab of the app, with the JavaScript exceptions it threw.
type page struct {
	name     string
	ctx      context.Context
	deadline time.Time
	mu       sync.Mutex
	errs     []string
}

func newPage(parent context.Context, name string, deadline time.Time) (*page, context.CancelFunc) {
	p := &page{name: name, deadline: deadline}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			p.mu.Lock()
			p.errs = append(p.errs, msg)
			p.mu.Unlock()
		}
	}))
	p.ctx = ctx
	return p, cancel
}

func (p *page) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithDeadline(p.ctx, p.deadline)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", p.name, what, err, p.errs)
	}
}

// eval evaluates a JavaScript expression on the page (promises awaited)
// into v.
func (p *page) eval(t *testing.T, expr string, v any) {
	t.Helper()
	ctx, cancel := context.WithDeadline(p.ctx, p.deadline)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err == nil && v != nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", p.name, expr, err, p.errs)
	}
}

// until waits (within the test's deadline) for a condition on the page.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(0))(ctx, t)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", expr, err)
		}
		return nil
	})
}

type networkConditions struct {
	Offline            bool    `json:"offline"`
	Latency            float64 `json:"latency"`
	DownloadThroughput float64 `json:"downloadThroughput"`
	UploadThroughput   float64 `json:"uploadThroughput"`
}

// offline takes the tab off the network (or back) with DevTools' network
// emulation, as a lost connection.
func offline(off bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		cmd := cdp.Command[networkConditions, cdp.Empty]{Method: "Network.emulateNetworkConditions"}
		_, err := chromedp.Call(ctx, cmd, networkConditions{Offline: off, DownloadThroughput: -1, UploadThroughput: -1})
		return err
	})
}

// click clicks an element of the page, as a user.
func click(t *testing.T, p *page, sel string) {
	t.Helper()
	p.eval(t, fmt.Sprintf(`document.querySelector(%q).click()`, sel), nil)
}

// board is what a tab shows: id -> "title|done|column", from the DOM.
const board = `Object.fromEntries([...document.querySelectorAll('#board li[data-id]')].map(li =>
  [li.dataset.id, li.querySelector('input.title').value + '|' + li.querySelector('input.done').checked + '|' + li.closest('section').dataset.column]))`

// The todo example app as `make todo` runs it (canon dev --app, here on
// a real Kafka broker), in two tabs of headless Chromium: an edit in one
// is shown at once (optimistic) and reaches the other; concurrent edits
// converge on Canon's state; two renames of one todo, one made offline,
// end as the server's rule decides (the later one is a rename_conflict,
// rolled back in its tab, logged with its code); and a different bundle
// deployed while the app runs is reported in both tabs as a mismatch.
func TestTodoAppInTwoTabs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Kafka and Chromium")
	}
	chromium := testenv.Chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := testenv.NewKafka(t)
	bin := testenv.BuildCanon(t)
	dir := testenv.ProcessDir(t, "canon-dev")
	p := testenv.NewProgramProcess(t, bin, "canon-dev", "dev", "--brokers", strings.Join(k.Brokers, ","),
		"--topic-prefix", k.Topic(t, "app")+".", "--topic-partitions", "2", "--clickhouse-local=false",
		"--http", "127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--app", "app", "--app-mutators", "mutators.ts", "--app-project", "todo")
	p.Start(ctx)
	t.Cleanup(p.CheckLog)
	var appURL, token, hash string
	canontest.Wait(t, ctx, "canon dev's banner with the app, its bundle active", func() (bool, error) {
		log := p.CurrentLog()
		m, b := appLine.FindStringSubmatch(log), appBundle.FindStringSubmatch(log)
		if m == nil || b == nil {
			return false, canontest.Pending("no app lines in the banner yet")
		}
		appURL, token, hash = m[1], m[2], b[1]
		return true, nil
	})
	base := "http://" + devStarted.FindStringSubmatch(p.CurrentLog())[1]
	js, err := os.ReadFile("mutators.js")
	if err != nil {
		t.Fatal(err)
	}
	if want := schemas.BundleHash(js); hash != want {
		t.Fatalf("canon dev deployed bundle %s, mutators.js is %s", hash, want)
	}

	deadline, _ := ctx.Deadline()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	a, cancelA := newPage(alloc, "tab A", deadline)
	defer cancelA()
	if err := chromedp.Do(a.ctx); err != nil {
		t.Fatalf("open the browser: %v", err)
	}
	b, cancelB := newPage(a.ctx, "tab B", deadline)
	defer cancelB()
	if err := chromedp.Do(b.ctx); err != nil {
		t.Fatalf("open tab B: %v", err)
	}
	tabs := []*page{a, b}
	for _, tb := range tabs {
		tb.do(t, "open the app", chromedp.Navigate(appURL+"#token="+token),
			until(`document.querySelector('#status').textContent === 'online'`))
	}
	var clients [2]string
	for i, tb := range tabs {
		tb.eval(t, `window.todoApp.canon.ready.then(() => window.todoApp.canon.clientID)`, &clients[i])
	}
	if clients[0] == clients[1] {
		t.Fatalf("both tabs are client %s", clients[0])
	}

	// create submits the form and returns the board right after, in the
	// same task: the new todo is there before Canon has seen it.
	create := func(tb *page, title string) map[string]string {
		t.Helper()
		var bd map[string]string
		tb.eval(t, fmt.Sprintf(`(() => { document.querySelector('#title').value = %q;
			document.querySelector('#new').requestSubmit(); return %s; })()`, title, board), &bd)
		return bd
	}
	bd := create(a, "buy milk")
	var id string
	for k, v := range bd {
		if v == "buy milk|false|todo" {
			id = k
		}
	}
	if id == "" {
		t.Fatalf("tab A's board right after the submit: %v, want the new todo on it", bd)
	}
	b.do(t, "see A's todo", until(fmt.Sprintf(`document.querySelector('li[data-id=%q] input.title')?.value === 'buy milk'`, id)))
	click(t, b, fmt.Sprintf(`li[data-id=%q] input.done`, id))
	a.do(t, "see B's toggle", until(fmt.Sprintf(`document.querySelector('li[data-id=%q] input.done').checked`, id)))

	// converged: no pending mutation in either tab, and both show
	// Canon's todos.
	converged := func(what string) map[string]string {
		t.Helper()
		for _, tb := range tabs {
			tb.do(t, what, until(`window.todoApp.canon.pendingCount === 0`))
		}
		want := canonBoard(t, base, token)
		for _, tb := range tabs {
			tb.do(t, what, until(fmt.Sprintf(`window.todoApp.canon.version >= %d`, want.version)))
			var got map[string]string
			tb.eval(t, board, &got)
			if fmt.Sprint(got) != fmt.Sprint(want.todos) {
				t.Fatalf("%s: %s shows\n %v\nCanon has\n %v", what, tb.name, got, want.todos)
			}
		}
		return want.todos
	}

	// Concurrent edits: ten todos each at once, and a move.
	for i := range 10 {
		create(a, fmt.Sprintf("a%d", i))
		create(b, fmt.Sprintf("b%d", i))
	}
	click(t, a, fmt.Sprintf(`li[data-id=%q] button.right`, id))
	if got := converged("concurrent edits"); len(got) != 21 || got[id] != "buy milk|true|doing" {
		t.Fatalf("after concurrent edits: %v", got)
	}

	// The rename conflict: B, offline, renames the todo from "buy milk";
	// A renames it too, online, and Canon applies A's first. B's, pushed
	// when it is back, was made from a title that is no longer the todo's:
	// todo.rename refuses it (rename_conflict), and B shows A's title.
	b.do(t, "go offline", offline(true), until(`document.querySelector('#status').textContent === 'offline'`))
	rename := func(tb *page, title string) {
		t.Helper()
		var shown string
		tb.eval(t, fmt.Sprintf(`(() => { const el = document.querySelector('li[data-id=%q] input.title');
			el.focus(); el.value = %q; el.dispatchEvent(new Event('change')); el.blur(); return el.value; })()`, id, title), &shown)
		if shown != title {
			t.Fatalf("%s: the title after the rename is %q", tb.name, shown)
		}
	}
	rename(b, "buy oat milk")
	rename(a, "buy soy milk")
	a.do(t, "A's rename applied", until(fmt.Sprintf(`window.todoApp.outcomes.includes('todo.rename %s: applied')`, id)))
	var offlineTitle string
	b.eval(t, fmt.Sprintf(`document.querySelector('li[data-id=%q] input.title').value`, id), &offlineTitle)
	if offlineTitle != "buy oat milk" {
		t.Fatalf("tab B offline shows %q, want its own rename", offlineTitle)
	}
	b.do(t, "back online", offline(false),
		until(fmt.Sprintf(`window.todoApp.outcomes.includes('todo.rename %s: error rename_conflict')`, id)))
	if got := converged("rename conflict"); got[id] != "buy soy milk|true|doing" {
		t.Fatalf("after the rename conflict the todo is %q, want A's title", got[id])
	}
	var logged string
	b.eval(t, `[...document.querySelectorAll('#log li.error')].map(li => li.textContent).join('\n')`, &logged)
	if !strings.Contains(logged, `rename_conflict: todo `+id+` was renamed to "buy soy milk" meanwhile`) {
		t.Fatalf("tab B's log does not show the conflict with the title that won:\n%s", logged)
	}

	// The bundle check: nothing reported so far (the app runs the deployed
	// bundle); a different bundle deployed now decides the next edit, and
	// both tabs report the mismatch.
	for _, tb := range tabs {
		var problems []string
		tb.eval(t, `window.todoApp.problems`, &problems)
		if len(problems) != 0 {
			t.Fatalf("%s reports %v with the deployed bundle", tb.name, problems)
		}
	}
	other := append(append([]byte{}, js...), "\n// another build\n"...)
	deploy(t, base, token, other)
	create(a, "after the deploy")
	for _, tb := range tabs {
		tb.do(t, "report the mismatch", until(`window.todoApp.problems.some(p => p.startsWith('bundle_mismatch: Canon decides dev/todo with mutator bundle `+schemas.BundleHash(other)[:12]+`'))`))
	}
	converged("after the deploy")

	// Edit in A -> on B's board, 100 times, one at a time: the time from
	// A's submit to B's DOM holding the todo (both clocks are the
	// browser's).
	b.eval(t, `(() => { window.seen = {}; new MutationObserver(() => {
		for (const el of document.querySelectorAll('#board input.title')) {
			if (el.value.startsWith('lat ') && !(el.value in window.seen)) window.seen[el.value] = performance.timeOrigin + performance.now();
		}
	}).observe(document.querySelector('#board'), {childList: true, subtree: true}); })()`, nil)
	var lat []float64
	for i := range 100 {
		var t0, t1 float64
		a.eval(t, fmt.Sprintf(`(() => { const t = performance.timeOrigin + performance.now();
			document.querySelector('#title').value = 'lat %d'; document.querySelector('#new').requestSubmit(); return t; })()`, i), &t0)
		b.do(t, "see the edit", until(fmt.Sprintf(`window.seen['lat %d'] > 0`, i)))
		b.eval(t, fmt.Sprintf(`window.seen['lat %d']`, i), &t1)
		lat = append(lat, t1-t0)
	}
	slices.Sort(lat)
	t.Logf("edit in tab A -> on tab B's board (canon dev, real Kafka), 100 edits: p50 %.1f ms, p99 %.1f ms, max %.1f ms", lat[50], lat[98], lat[99])
	for _, tb := range tabs {
		tb.mu.Lock()
		if len(tb.errs) > 0 {
			t.Errorf("%s threw %v", tb.name, tb.errs)
		}
		tb.mu.Unlock()
	}
}

type canonTodos struct {
	version uint64
	todos   map[string]string
}

// canonBoard is Canon's todos in the form of board.
func canonBoard(t *testing.T, base, token string) canonTodos {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/projects/dev/todo?items=full", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st readapi.StateResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := canonTodos{version: st.Version, todos: map[string]string{}}
	for _, it := range st.Collections["todos"] {
		var td struct {
			Title  string `json:"title"`
			Done   bool   `json:"done"`
			Column string `json:"column"`
		}
		if err := json.Unmarshal(it.Data, &td); err != nil {
			t.Fatal(err)
		}
		out.todos[it.ID] = fmt.Sprintf("%s|%t|%s", td.Title, td.Done, td.Column)
	}
	return out
}

func deploy(t *testing.T, base, token string, src []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+"/v1/projects/dev/todo/mutators", bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/javascript")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("deploy: %s: %s", resp.Status, b.Bytes())
	}
}

// The app type-checks under TypeScript's strict mode against the
// client's sources and the mutators (the build in canon dev does not
// type-check), with the TypeScript compiler the client pins.
func TestTodoAppTypeChecks(t *testing.T) {
	client := testenv.NPMProject(t, "../../clients/typescript", "typescript")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(client, "node_modules", ".bin", "tsc"), "-p", filepath.Join("app", "tsconfig.json"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p app/tsconfig.json: %v\n%s", err, out)
	}
}
