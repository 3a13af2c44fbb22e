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
	"testing"
	"time"

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

// eval evaluates a JavaScript expression in a tab (promises awaited)
// into v (nil: the value is not wanted).
func eval(t *testing.T, p *testenv.Tab, expr string, v any) {
	t.Helper()
	raw := p.Eval(t, expr)
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %s: %v", p.Name, expr, err)
		}
	}
}

// click clicks an element of the page, as a user.
func click(t *testing.T, p *testenv.Tab, sel string) {
	t.Helper()
	eval(t, p, fmt.Sprintf(`document.querySelector(%q).click()`, sel), nil)
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
	tabs := testenv.OpenTabs(t, chromium, deadline, []string{"tab A", "tab B"})
	a, b := tabs[0], tabs[1]
	for _, tb := range tabs {
		tb.Do(t, "open the app", chromedp.Navigate(appURL+"#token="+token),
			testenv.Until(`document.querySelector('#status').textContent === 'online'`))
	}
	var clients [2]string
	for i, tb := range tabs {
		eval(t, tb, `window.todoApp.canon.ready.then(() => window.todoApp.canon.clientID)`, &clients[i])
	}
	if clients[0] == clients[1] {
		t.Fatalf("both tabs are client %s", clients[0])
	}

	// create submits the form and returns the board right after, in the
	// same task: the new todo is there before Canon has seen it.
	create := func(tb *testenv.Tab, title string) map[string]string {
		t.Helper()
		var bd map[string]string
		eval(t, tb, fmt.Sprintf(`(() => { document.querySelector('#title').value = %q;
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
	b.Do(t, "see A's todo", testenv.Until(fmt.Sprintf(`document.querySelector('li[data-id=%q] input.title')?.value === 'buy milk'`, id)))
	click(t, b, fmt.Sprintf(`li[data-id=%q] input.done`, id))
	a.Do(t, "see B's toggle", testenv.Until(fmt.Sprintf(`document.querySelector('li[data-id=%q] input.done').checked`, id)))

	// converged: no pending mutation in either tab, and both show
	// Canon's todos.
	converged := func(what string) map[string]string {
		t.Helper()
		for _, tb := range tabs {
			tb.Do(t, what, testenv.Until(`window.todoApp.canon.pendingCount === 0`))
		}
		want := canonBoard(t, base, token)
		for _, tb := range tabs {
			tb.Do(t, what, testenv.Until(fmt.Sprintf(`window.todoApp.canon.version >= %d`, want.version)))
			var got map[string]string
			eval(t, tb, board, &got)
			if fmt.Sprint(got) != fmt.Sprint(want.todos) {
				t.Fatalf("%s: %s shows\n %v\nCanon has\n %v", what, tb.Name, got, want.todos)
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
	b.Do(t, "go offline", testenv.Offline(true), testenv.Until(`document.querySelector('#status').textContent === 'offline'`))
	rename := func(tb *testenv.Tab, title string) {
		t.Helper()
		var shown string
		eval(t, tb, fmt.Sprintf(`(() => { const el = document.querySelector('li[data-id=%q] input.title');
			el.focus(); el.value = %q; el.dispatchEvent(new Event('change')); el.blur(); return el.value; })()`, id, title), &shown)
		if shown != title {
			t.Fatalf("%s: the title after the rename is %q", tb.Name, shown)
		}
	}
	rename(b, "buy oat milk")
	rename(a, "buy soy milk")
	a.Do(t, "A's rename applied", testenv.Until(fmt.Sprintf(`window.todoApp.outcomes.includes('todo.rename %s: applied')`, id)))
	var offlineTitle string
	eval(t, b, fmt.Sprintf(`document.querySelector('li[data-id=%q] input.title').value`, id), &offlineTitle)
	if offlineTitle != "buy oat milk" {
		t.Fatalf("tab B offline shows %q, want its own rename", offlineTitle)
	}
	b.Do(t, "back online", testenv.Offline(false),
		testenv.Until(fmt.Sprintf(`window.todoApp.outcomes.includes('todo.rename %s: error rename_conflict')`, id)))
	if got := converged("rename conflict"); got[id] != "buy soy milk|true|doing" {
		t.Fatalf("after the rename conflict the todo is %q, want A's title", got[id])
	}
	var logged string
	eval(t, b, `[...document.querySelectorAll('#log li.error')].map(li => li.textContent).join('\n')`, &logged)
	if !strings.Contains(logged, `rename_conflict: todo `+id+` was renamed to "buy soy milk" meanwhile`) {
		t.Fatalf("tab B's log does not show the conflict with the title that won:\n%s", logged)
	}

	// The bundle check: nothing reported so far (the app runs the deployed
	// bundle); a different bundle deployed now decides the next edit, and
	// both tabs report the mismatch.
	for _, tb := range tabs {
		var problems []string
		eval(t, tb, `window.todoApp.problems`, &problems)
		if len(problems) != 0 {
			t.Fatalf("%s reports %v with the deployed bundle", tb.Name, problems)
		}
	}
	other := append(append([]byte{}, js...), "\n// another build\n"...)
	deploy(t, base, token, other)
	create(a, "after the deploy")
	for _, tb := range tabs {
		tb.Do(t, "report the mismatch", testenv.Until(`window.todoApp.problems.some(p => p.startsWith('bundle_mismatch: Canon decides dev/todo with mutator bundle `+schemas.BundleHash(other)[:12]+`'))`))
	}
	converged("after the deploy")

	// Edit in A -> on B's board, 100 times, one at a time: the time from
	// A's submit to B's DOM holding the todo (both clocks are the
	// browser's).
	eval(t, b, `(() => { window.seen = {}; new MutationObserver(() => {
		for (const el of document.querySelectorAll('#board input.title')) {
			if (el.value.startsWith('lat ') && !(el.value in window.seen)) window.seen[el.value] = performance.timeOrigin + performance.now();
		}
	}).observe(document.querySelector('#board'), {childList: true, subtree: true}); })()`, nil)
	var lat []float64
	for i := range 100 {
		var t0, t1 float64
		eval(t, a, fmt.Sprintf(`(() => { const t = performance.timeOrigin + performance.now();
			document.querySelector('#title').value = 'lat %d'; document.querySelector('#new').requestSubmit(); return t; })()`, i), &t0)
		b.Do(t, "see the edit", testenv.Until(fmt.Sprintf(`window.seen['lat %d'] > 0`, i)))
		eval(t, b, fmt.Sprintf(`window.seen['lat %d']`, i), &t1)
		lat = append(lat, t1-t0)
	}
	slices.Sort(lat)
	t.Logf("edit in tab A -> on tab B's board (canon dev, real Kafka), 100 edits: p50 %.1f ms, p99 %.1f ms, max %.1f ms", lat[50], lat[98], lat[99])
	for _, tb := range tabs {
		if errs := tb.Exceptions(); len(errs) > 0 {
			t.Errorf("%s threw %v", tb.Name, errs)
		}
	}
}

type canonTodos struct {
	version uint64
	todos   map[string]string
}

// canonBoard is Canon's todos in the form of board.
func canonBoard(t *testing.T, base, token string) canonTodos {
	t.Helper()
	var st readapi.StateResponse
	canontest.GetJSON(t, context.Background(), base+"/v1/projects/dev/todo?items=full", token, &st)
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
