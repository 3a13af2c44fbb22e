package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/live"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/webui"
	"github.com/canon-sync/canon/wire"
)

// startUIServer serves what the readapi role serves in canon dev (the
// read API, the websocket with pushes, the web UI) plus the producer's
// HTTP push, on one server over the pipeline's store.
func startUIServer(t *testing.T, ctx context.Context, pl *pipeline) string {
	t.Helper()
	return startServer(t, ctx, pl, nil)
}

// startServer is startUIServer with the CORS policy of canon dev and
// serve (--cors-origins) when cors is not nil: on the HTTP APIs and on
// websocket upgrades.
func startServer(t *testing.T, ctx context.Context, pl *pipeline, cors *httpapi.CORS) string {
	t.Helper()
	p := pl.stack.NewProducer(producer.Config{Partitions: pl.info.Partitions})
	mux := http.NewServeMux()
	ra, err := readapi.New(readapi.Config{Store: pl.store, Keys: pl.keys.VerifyOnly()})
	if err != nil {
		t.Fatal(err)
	}
	lcfg := live.Config{Store: pl.store, Kafka: pl.kcfg, Topics: pl.info.Names, Keys: pl.keys.VerifyOnly(), Pusher: p}
	var h http.Handler = mux
	if cors != nil {
		lcfg.CheckOrigin, h = cors.CheckOrigin, cors.Handler(mux)
	}
	ws, err := live.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	ui, err := webui.New()
	if err != nil {
		t.Fatal(err)
	}
	p.Mount(mux)
	ra.Mount(mux)
	ws.Mount(mux)
	ui.Mount(mux)
	// The HTTP server closes after the live server: Run closes the sockets.
	url := pl.stack.Serve(h)
	pl.stack.Go("live", ws.Run)
	return url
}

// push pushes mutations over HTTP and waits for their outcomes.
func push(t *testing.T, base, token, project, group string, muts ...map[string]any) []wire.Outcome {
	t.Helper()
	b, err := json.Marshal(map[string]any{"clientGroup": group, "mutations": muts})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/projects/acme/"+project+"/push?wait=applied", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Outcomes []wire.Outcome `json:"outcomes"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil || len(out.Outcomes) != len(muts) {
		t.Fatalf("push: %d %s", resp.StatusCode, body)
	}
	return out.Outcomes
}

// eval evaluates a JavaScript expression in a tab, awaiting a promise,
// for its string value.
func eval(t *testing.T, tb *testenv.Tab, expr string) string {
	t.Helper()
	var v string
	if err := json.Unmarshal(tb.Eval(t, expr), &v); err != nil {
		t.Fatalf("%s: evaluate %s: %v", tb.Name, expr, err)
	}
	return v
}

// textHas is a condition: the element's text contains s.
func textHas(selector, s string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").includes(%q)`, selector, s)
}

func visible(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(selector))
}

func click(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(selector), chromedp.NodeVisible)
}

func setValue(selector, value string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(selector), value)
}

// choose picks an option of a select, as a user does (a change event).
func choose(selector, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		ok, err := chromedp.Evaluate[bool](fmt.Sprintf(
			`(s => { s.value = %q; s.dispatchEvent(new Event("change")); return s.value === %q })(document.querySelector(%q))`,
			value, value, selector))(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("%s has no option %q", selector, value)
		}
		return err
	})
}

// Two pages on one project in headless Chromium, each editing through its
// own @canon/client: an edit in one appears in the other, both see the
// timeline with every outcome (applied, error, a gap's rejection), an
// edit made offline shows at once as pending and reaches the other page
// after the reconnect, an edit Canon refuses is rolled back and shown as
// such, a past version reads as it was and a branch starts from it, and an
// item's history shows the diff between its versions.
func TestBrowserTwoPagesEditLive(t *testing.T) {
	chromium := testenv.Chromium(t)
	artifacts := testenv.ArtifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := startPipeline(t, 2)
	base := startUIServer(t, ctx, pl)
	token := pl.token(t, "ann", "*")

	// The project exists with one item before the pages open.
	if o := push(t, base, token, "web", "seed", map[string]any{"client": "seed", "id": 1, "name": "item.put",
		"args": map[string]any{"collection": "notes", "id": "n1", "data": map[string]any{"text": "hello"}}}); o[0].Status != "applied" {
		t.Fatalf("seed: %+v", o)
	}

	// Two tabs of one browser: one local storage (the token) and one
	// IndexedDB, where each tab's client claims a slot of its own.
	deadline, _ := ctx.Deadline()
	tabs := testenv.OpenTabs(t, chromium, deadline, []string{"page A", "page B"}, chromedp.WindowSize(1280, 900))
	a, b := tabs[0], tabs[1]
	defer func() {
		if t.Failed() {
			a.Screenshot(t, artifacts, "failed-a")
			b.Screenshot(t, artifacts, "failed-b")
			t.Logf("screenshots in %s", artifacts)
		}
	}()

	// A signs in with the token in the fragment and opens the project
	// from the list; B opens it by its address.
	a.Do(t, "list the projects",
		chromedp.Navigate(base+"/ui/#token="+token),
		visible(`a[data-project="web"]`),
		testenv.Until(`!location.hash.includes("token")`))
	a.Screenshot(t, artifacts, "1-projects")
	a.Do(t, "open the project",
		click(`a[data-project="web"]`),
		visible(`#status[data-state="live"]`),
		testenv.Until(textHas(`tr[data-item="notes/n1"] .preview`, `"text":"hello"`)))
	b.Do(t, "open the project",
		chromedp.Navigate(base+"/ui/#/p/acme/web"),
		visible(`#status[data-state="live"]`),
		testenv.Until(textHas(`tr[data-item="notes/n1"] .preview`, `"text":"hello"`)))
	clientOf := func(tb *testenv.Tab) string {
		tb.Do(t, "know the client", testenv.Until(`document.querySelector("#who")?.dataset.client !== undefined`))
		return eval(t, tb, `document.querySelector("#who").dataset.client`)
	}
	clientA, clientB := clientOf(a), clientOf(b)
	if clientA == "" || clientA == clientB {
		t.Fatalf("the pages push as clients %q and %q: each needs its own", clientA, clientB)
	}

	// A edits n1; B sees the new body.
	a.Do(t, "open n1",
		click(`tr[data-item="notes/n1"] a`),
		visible(`#editor`),
		testenv.Until(textHas(`#diff`, `"text": "hello"`)),
		setValue(`#editor`, `{"text": "hello from A"}`))
	saved := time.Now()
	a.Do(t, "save n1", click(`#save`))
	b.Do(t, "see A's edit", testenv.Until(textHas(`tr[data-item="notes/n1"] .preview`, `"text":"hello from A"`)))
	t.Logf("page B showed page A's edit %v after the click on Save (polled every 50ms)", time.Since(saved).Round(time.Millisecond))
	a.Do(t, "see the edit applied", visible(`#outcomes li[data-id="1"][data-status="applied"]`))
	a.Screenshot(t, artifacts, "2-a-edited")
	b.Do(t, "see A's edit in the timeline", testenv.Until(textHas(`#timeline li[data-version="2"]`, clientA)))
	b.Screenshot(t, artifacts, "3-b-sees-edit")

	// B adds n2; A, on n1's page, sees it in the timeline, then in the list.
	b.Do(t, "add n2",
		setValue(`#new-id`, "n2"),
		setValue(`#new-data`, `{"text": "from B"}`),
		click(`#new-put`),
		visible(`#outcomes li[data-id="1"][data-status="applied"]`),
		visible(`tr[data-item="notes/n2"]`))
	a.Do(t, "see B's item",
		testenv.Until(textHas(`#timeline li[data-version="3"]`, "notes/n2")),
		click(`#crumbs a:nth-of-type(2)`),
		testenv.Until(textHas(`tr[data-item="notes/n2"] .preview`, "from B")))

	// A names the project (a scalar); B sees the name.
	a.Do(t, "set the project's name",
		setValue(`#scalar-name`, "name"),
		setValue(`#scalar-value`, `"Web site"`),
		click(`#scalar-set`),
		visible(`#outcomes li[data-id="2"][data-status="applied"]`))
	b.Do(t, "see the name", testenv.Until(textHas(`dl.scalars`, `"Web site"`)))

	// A goes offline and adds n3: its page shows it at once, pending and
	// queued in the browser, while B does not have it; back online, it is
	// sent, applied, and B shows it.
	a.Do(t, "go offline",
		click(`#crumbs a:nth-of-type(2)`),
		visible(`#new-id`),
		testenv.Offline(true),
		visible(`#status[data-state="reconnecting"]`),
		setValue(`#new-id`, "n3"),
		setValue(`#new-data`, `{"text": "written offline"}`),
		click(`#new-put`),
		testenv.Until(textHas(`tr[data-item="notes/n3"][data-pending] .preview`, "written offline")),
		visible(`#outcomes li[data-id="3"][data-status="queued"]`))
	a.Screenshot(t, artifacts, "4-a-offline-edit")
	if got := eval(t, b, `String(document.querySelector('tr[data-item="notes/n3"]'))`); got != "null" {
		t.Fatalf("page B shows n3 while page A is offline: %s", got)
	}
	a.Do(t, "back online",
		testenv.Offline(false),
		visible(`#status[data-state="live"]`),
		visible(`#outcomes li[data-id="3"][data-status="applied"]`),
		testenv.Until(`document.querySelector('tr[data-item="notes/n3"]:not([data-pending])') !== null`))
	b.Do(t, "see A's offline edit", testenv.Until(textHas(`tr[data-item="notes/n3"] .preview`, "written offline")))

	// A rollback: B, offline, sets a scalar of 1,000 bytes, which fits; A
	// sets another one meanwhile, so that together they exceed Canon's
	// 1.5 KB of scalars. Back online, B's edit is decided an error
	// (too_large): its page drops the value and says why.
	long := strings.Repeat("x", 1000)
	b.Do(t, "set a scalar offline",
		testenv.Offline(true),
		visible(`#status[data-state="reconnecting"]`),
		setValue(`#scalar-name`, "b_notes"),
		setValue(`#scalar-value`, `"`+long+`"`),
		click(`#scalar-set`),
		testenv.Until(`document.querySelector('dt[data-scalar="b_notes"][data-pending]') !== null`))
	a.Do(t, "set another scalar",
		setValue(`#scalar-name`, "a_notes"),
		setValue(`#scalar-value`, `"`+long+`"`),
		click(`#scalar-set`),
		visible(`#outcomes li[data-id="4"][data-status="applied"]`))
	b.Do(t, "back online: rolled back",
		testenv.Offline(false),
		visible(`#status[data-state="live"]`),
		testenv.Until(textHas(`#outcomes li[data-id="2"][data-status="error"]`, "too_large")),
		testenv.Until(textHas(`#outcomes li[data-id="2"][data-status="error"]`, "rolled back")),
		testenv.Until(`document.querySelector('dt[data-scalar="b_notes"]') === null`),
		testenv.Until(`document.querySelector('dt[data-scalar="a_notes"]') !== null`))
	b.Screenshot(t, artifacts, "5-b-rolled-back")

	// Outcomes other than applied, pushed by another client: an error
	// (recorded in a version) and a gap (rejected, no version).
	if o := push(t, base, token, "web", "bot", map[string]any{"client": "bot", "id": 1, "name": "item.delete",
		"args": map[string]any{"collection": "notes", "id": "missing"}}); o[0].Status != "error" {
		t.Fatalf("delete of a missing item: %+v", o)
	}
	if o := push(t, base, token, "web", "bot", map[string]any{"client": "bot", "id": 5, "name": "item.put",
		"args": map[string]any{"collection": "notes", "id": "n5", "data": 5}}); o[0].Status != "rejected" || o[0].Reason != "gap" {
		t.Fatalf("a gap: %+v", o)
	}
	for _, p := range []*testenv.Tab{a, b} {
		p.Do(t, "see the error and the gap",
			testenv.Until(textHas(`#timeline li[data-version="8"] li.mutation[data-status="error"]`, "does not exist")),
			testenv.Until(textHas(`#timeline li.rejected[data-reason="gap"][data-client="bot"]`, "expected #2")))
	}
	b.Screenshot(t, artifacts, "6-b-outcomes")

	// B opens version 1 from the timeline: n1 as it was, no n2.
	b.Do(t, "open version 1",
		click(`#timeline li[data-version="1"] > a`),
		visible(`#past[data-at="1"]`),
		testenv.Until(textHas(`tr[data-item="notes/n1"] .preview`, `{"text":"hello"}`)),
		testenv.Until(`document.querySelector('tr[data-item="notes/n2"]') === null`))
	b.Screenshot(t, artifacts, "7-b-version-1")
	// … and starts a branch there: its version 1 is main's version 1.
	b.Do(t, "start a branch from version 1",
		setValue(`#branch-name`, "draft"),
		click(`#branch-create`),
		testenv.Until(`location.hash.includes("branch=draft")`),
		visible(`#status[data-state="live"]`),
		testenv.Until(textHas(`#timeline li[data-version="1"]`, "from main@v1")),
		testenv.Until(textHas(`tr[data-item="notes/n1"] .preview`, `{"text":"hello"}`)),
		testenv.Until(`document.querySelector('tr[data-item="notes/n2"]') === null`))
	b.Screenshot(t, artifacts, "8-b-branch")
	// The branch select lists both; picking main goes back to it.
	b.Do(t, "go back to main",
		testenv.Until(textHas(`#branch`, "draft (v1)")),
		testenv.Until(textHas(`#branch`, "main (v8)")),
		choose(`#branch`, "main"),
		testenv.Until(`!location.hash.includes("branch=")`),
		testenv.Until(textHas(`tr[data-item="notes/n2"] .preview`, "from B")))

	// A opens n1's history: versions 1 and 2, and the diff between them.
	a.Do(t, "open n1's history",
		click(`tr[data-item="notes/n1"] a`),
		visible(`#history tr[data-version="2"]`),
		visible(`#history tr[data-version="1"]`),
		visible(`#diff[data-from="1"][data-to="2"]`),
		testenv.Until(textHas(`#diff .del`, `"text": "hello"`)),
		testenv.Until(textHas(`#diff .add`, `"text": "hello from A"`)))
	a.Screenshot(t, artifacts, "9-a-history-diff")

	// A token the server refuses brings the sign-in page back, with why.
	a.Do(t, "use a bad token",
		chromedp.Navigate(base+"/ui/#/?token=not.a.token"),
		visible(`#use-token`),
		testenv.Until(textHas(`main .error`, "The token was refused")))
	a.Screenshot(t, artifacts, "10-a-refused-token")

	for _, p := range []*testenv.Tab{a, b} {
		if errs := p.Exceptions(); len(errs) > 0 {
			t.Errorf("%s threw: %s", p.Name, strings.Join(errs, "\n"))
		}
	}
}
