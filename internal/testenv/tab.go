package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Tab is one page of a browser test in headless Chromium, with the
// JavaScript exceptions it threw, which a failing step reports.
type Tab struct {
	Name string
	// ctx is the tab's: it lives until its cancel is called. Steps run
	// until deadline.
	ctx      context.Context
	deadline time.Time
	mu       sync.Mutex
	errs     []string
}

// NewTab makes a tab in parent's browser (a chromedp allocator or another
// tab's context); it opens with its first step.
func NewTab(parent context.Context, name string, deadline time.Time) (*Tab, context.CancelFunc) {
	tb := &Tab{Name: name, deadline: deadline}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.mu.Lock()
			tb.errs = append(tb.errs, fmt.Sprintf("%s (%s:%d:%d)", msg, d.URL, d.LineNumber+1, d.ColumnNumber+1))
			tb.mu.Unlock()
		}
	}))
	tb.ctx = ctx
	return tb, cancel
}

// Context is the tab's context, for a tab opened beside it.
func (tb *Tab) Context() context.Context { return tb.ctx }

// Start opens the tab (the browser with the first one). The first run on
// a tab's context sets its life: a run on a context with a deadline would
// close the tab with that deadline.
func (tb *Tab) Start(t testing.TB) {
	t.Helper()
	if err := chromedp.Do(tb.ctx); err != nil {
		t.Fatalf("%s: open: %v", tb.Name, err)
	}
}

// Screenshot saves a screenshot of the whole page as dir/name.png. It
// runs past the steps' deadline too: the screenshot of a failure is the
// point.
func (tb *Tab) Screenshot(t testing.TB, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("%s: screenshot %s: %v", tb.Name, name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Error(err)
	}
}

// Exceptions are the JavaScript exceptions the tab's pages threw so far.
func (tb *Tab) Exceptions() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.errs...)
}

// Do runs steps in the tab, failing the test with what it was doing.
func (tb *Tab) Do(t testing.TB, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithDeadline(tb.ctx, tb.deadline)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", tb.Name, what, err, tb.Exceptions())
	}
}

// Eval evaluates a JavaScript expression in the tab, awaiting a promise,
// and returns its value as JSON text.
func (tb *Tab) Eval(t testing.TB, expr string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithDeadline(tb.ctx, tb.deadline)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %s: %v (JavaScript exceptions: %v)", tb.Name, expr, err, tb.Exceptions())
	}
	return v
}

// Until waits, without a time limit of its own (the step's deadline has
// one), for a JavaScript condition to hold in the page.
func Until(expr string) chromedp.Action[chromedp.Void] {
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

// Offline takes the tab off the network (or back) with DevTools' network
// emulation, as a user's lost connection: requests and sockets fail and
// the page gets its offline event.
func Offline(off bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		cmd := cdp.Command[networkConditions, cdp.Empty]{Method: "Network.emulateNetworkConditions"}
		_, err := chromedp.Call(ctx, cmd, networkConditions{Offline: off, DownloadThroughput: -1, UploadThroughput: -1})
		return err
	})
}

// OpenTabs starts a headless Chromium (the binary at chromium, a data
// directory of the test's own, extra options such as a window size) and
// opens one tab of it per name, in that order; all of them share the
// browser's storage. Their steps run until deadline; the browser lives
// until the test ends, past that deadline, so that a failed test still
// gets its screenshots.
func OpenTabs(t testing.TB, chromium string, deadline time.Time, names []string, opts ...chromedp.ExecAllocatorOption) []*Tab {
	t.Helper()
	opts = append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir())), opts...)
	parent, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	tabs := make([]*Tab, len(names))
	for i, name := range names {
		tb, cancel := NewTab(parent, name, deadline)
		t.Cleanup(cancel)
		tb.Start(t)
		tabs[i], parent = tb, tb.ctx
	}
	return tabs
}
