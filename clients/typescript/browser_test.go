package typescript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/readapi"
)

// tab is one page of the test page (test/browser), with the JavaScript
// exceptions it threw.
type tab struct {
	name     string
	ctx      context.Context
	deadline time.Time
	mu       sync.Mutex
	errs     []string
}

func newTab(parent context.Context, name string, deadline time.Time) (*tab, context.CancelFunc) {
	tb := &tab{name: name, deadline: deadline}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			tb.mu.Lock()
			tb.errs = append(tb.errs, msg)
			tb.mu.Unlock()
		}
	}))
	tb.ctx = ctx
	return tb, cancel
}

func (tb *tab) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithDeadline(tb.ctx, tb.deadline)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", tb.name, what, err, tb.errs)
	}
}

// eval evaluates an expression of window.canonTest (promises awaited)
// and returns its value as JSON text.
func (tb *tab) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithDeadline(tb.ctx, tb.deadline)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage]("window.canonTest."+expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", tb.name, expr, err, tb.errs)
	}
	return string(v)
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
// emulation, as a user's lost connection: requests and sockets fail and
// the page gets its offline event.
func offline(off bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		cmd := cdp.Command[networkConditions, cdp.Empty]{Method: "Network.emulateNetworkConditions"}
		_, err := chromedp.Call(ctx, cmd, networkConditions{Offline: off, DownloadThroughput: -1, UploadThroughput: -1})
		return err
	})
}

// Two tabs of one browser run the client on one project of a real Canon
// (IndexedDB storage, one client each through the storage's slot locks):
// they converge under concurrent edits; a tab taken offline by network
// emulation makes 500 edits (1,000 pending mutations, rebased on the other
// tab's versions) while the other edits, and both converge once it is back; a change Canon refuses is rolled back; a tab reloaded in the
// middle of pushing 100 mutations resumes them from IndexedDB: each is
// applied once. (A version gap and a reset on the socket are tested in
// Node against a fake server: test/client.test.ts.)
func TestBrowserTabs(t *testing.T) {
	chromium := testenv.Chromium(t)
	dir := project(t)
	npm(t, dir, nil, "run", "--silent", "test-page")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := stack(t, func(mux *http.ServeMux) {
		mux.Handle("/client-test/", http.StripPrefix("/client-test/", http.FileServer(http.Dir(filepath.Join(dir, "build", "browser")))))
	})
	tok := token(t, s, "user:ann")
	deadline, _ := ctx.Deadline()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	// The first run on a tab's own context opens it for the test's life
	// (a run on a context with a deadline would close it with that).
	a, cancelA := newTab(alloc, "tab A", deadline)
	defer cancelA()
	if err := chromedp.Do(a.ctx); err != nil {
		t.Fatalf("open the browser: %v", err)
	}
	b, cancelB := newTab(a.ctx, "tab B", deadline)
	defer cancelB()
	if err := chromedp.Do(b.ctx); err != nil {
		t.Fatalf("open tab B: %v", err)
	}
	page := s.URL + "/client-test/index.html"
	start := fmt.Sprintf("start(%q, %q, %q)", s.URL, tok, "tabs")
	for _, tb := range []*tab{a, b} {
		tb.do(t, "open", chromedp.Navigate(page), until(`window.canonTest !== undefined`))
	}
	clientA, clientB := a.eval(t, start), b.eval(t, start)
	if clientA == clientB {
		t.Fatalf("both tabs are client %s: each needs its own", clientA)
	}
	a.do(t, "online", until(`window.canonTest.status() === "online"`))
	b.do(t, "online", until(`window.canonTest.status() === "online"`))
	if o := a.eval(t, `put("notes", "shared", {text: ""})`); !bytes.Contains([]byte(o), []byte(`applied`)) {
		t.Fatalf("seed: %s", o)
	}
	converged := func(what string) {
		t.Helper()
		for _, tb := range []*tab{a, b} {
			tb.do(t, what, until(`window.canonTest.pending() === 0`))
		}
		want := canonView(t, s, "tabs")
		var head struct{ Version int }
		if err := json.Unmarshal(want, &head); err != nil {
			t.Fatal(err)
		}
		for _, tb := range []*tab{a, b} {
			tb.do(t, what, until(`window.canonTest.version() >= `+strconv.Itoa(head.Version)))
			var v string
			if err := json.Unmarshal([]byte(tb.eval(t, "view()")), &v); err != nil {
				t.Fatal(err)
			}
			if got := normalize(t, []byte(v)); !bytes.Equal(got, want) {
				t.Fatalf("%s: %s: the tab's view\n %s\nCanon's\n %s", what, tb.name, got, want)
			}
			// The React view (useQuery) shows the same.
			tb.do(t, what+": React view", until(`window.canonTest.rendered() === window.canonTest.expected()`))
		}
	}

	t.Logf("tab A: mutate -> subscriber %s ms (median of 500)", a.eval(t, "localLatency(500)"))

	// Edit in A -> seen by B's subscriber, 200 times, one at a time.
	b.eval(t, "watch()")
	var lat []float64
	for i := range 200 {
		var t0, t1 float64
		if err := json.Unmarshal([]byte(a.eval(t, fmt.Sprintf("edit(%d)", i))), &t0); err != nil {
			t.Fatal(err)
		}
		b.do(t, "see the edit", until(fmt.Sprintf("window.canonTest.seenAt(%d) > 0", i)))
		if err := json.Unmarshal([]byte(b.eval(t, fmt.Sprintf("seenAt(%d)", i))), &t1); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, t1-t0)
	}
	slices.Sort(lat)
	t.Logf("edit in tab A -> tab B's subscriber, 200 edits: p50 %.1f ms, p99 %.1f ms, max %.1f ms", lat[100], lat[198], lat[199])

	// Concurrent edits: 100 mutations each, at once.
	a.eval(t, `edits("a", 50)`)
	b.eval(t, `edits("b", 50)`)
	converged("concurrent edits")

	// A goes offline and makes 500 edits (1,000 mutations); B makes 100
	// meanwhile, whose versions A rebases its 1,000 pending ones on.
	a.do(t, "go offline", offline(true), until(`window.canonTest.status() === "offline"`))
	if n := a.eval(t, `edits("o", 500)`); n != "1000" {
		t.Fatalf("pending offline: %s", n)
	}
	t.Logf("tab A offline: rebase of its 1,000 pending mutations %s ms (median of 7)", a.eval(t, "rebaseTime()"))
	b.eval(t, `edits("p", 50)`)
	b.do(t, "B's edits", until(`window.canonTest.pending() === 0`))
	if p := a.eval(t, "pending()"); p != "1000" {
		t.Fatalf("A pushed while offline: %s pending", p)
	}
	a.do(t, "back online", offline(false))
	converged("after offline edits")

	// Canon refuses note.bump (it does not know it): the change goes.
	var rb struct {
		Before, After bool
		O             struct{ Status, Code string }
	}
	var rbText string
	if err := json.Unmarshal([]byte(a.eval(t, "rollback()")), &rbText); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(rbText), &rb); err != nil || !rb.Before || rb.After || rb.O.Status != "error" || rb.O.Code != "unknown_mutator" {
		t.Fatalf("rollback: %s", rbText)
	}

	// A reloads in the middle of pushing 100 mutations (50 edits): once
	// the first of their outcomes is in (the client pushes a mutation
	// only once IndexedDB holds it).
	before := a.eval(t, "outcomes()")
	a.eval(t, `edits("r", 50)`)
	a.do(t, "reload", until(`window.canonTest.outcomes() > `+before), chromedp.Reload(), until(`window.canonTest !== undefined`))
	if again := a.eval(t, start); again != clientA {
		t.Fatalf("after the reload tab A is client %s, not %s", again, clientA)
	}
	t.Logf("tab A reloaded with %s of its 100 mutations pending", a.eval(t, "pending()"))
	converged("after the reload")
	var cl readapi.ClientResponse
	var id string
	if err := json.Unmarshal([]byte(clientA), &id); err != nil {
		t.Fatal(err)
	}
	get(t, s, "/v1/projects/acme/tabs/clients/"+id, &cl)
	// 1 seed, 500 timed locally, 200 timed to B, 100 concurrent, 1,000
	// offline, 1 refused, 100 around the reload.
	if cl.LastMutationID != 1902 {
		t.Fatalf("Canon's last id of tab A is %d, want 1902", cl.LastMutationID)
	}
	for id2, want := range map[int]string{1: "applied", 1801: "applied", 1802: "error", 1803: "applied", 1902: "applied"} {
		var m readapi.MutationResponse
		get(t, s, fmt.Sprintf("/v1/projects/acme/tabs/clients/%s/mutations/%d", id, id2), &m)
		if m.Status != want {
			t.Errorf("mutation %d of tab A: %+v, want %s", id2, m, want)
		}
	}
}
