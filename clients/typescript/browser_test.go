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
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/readapi"
)

// canonEval evaluates an expression of window.canonTest (promises
// awaited) in a tab and returns its value as JSON text.
func canonEval(t *testing.T, tb *testenv.Tab, expr string) string {
	t.Helper()
	return string(tb.Eval(t, "window.canonTest."+expr))
}

// Two tabs of one browser run the client on one project of a real Canon
// (IndexedDB storage, one client each through the storage's slot locks):
// they converge under concurrent edits; a tab taken offline by network
// emulation makes 500 edits (1,000 pending mutations, rebased on the other
// tab's versions) while the other edits, and both converge once it is back; a change Canon refuses is rolled back; a tab reloaded in the
// middle of pushing 100 mutations resumes them from IndexedDB: each is
// applied once. (A version gap and a reset on the socket:
// TestBrowserGapAndReset.)
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
	tabs := testenv.OpenTabs(t, chromium, deadline, []string{"tab A", "tab B"})
	a, b := tabs[0], tabs[1]
	page := s.URL + "/client-test/index.html"
	start := fmt.Sprintf("start(%q, %q, %q)", s.URL, tok, "tabs")
	for _, tb := range []*testenv.Tab{a, b} {
		tb.Do(t, "open", chromedp.Navigate(page), testenv.Until(`window.canonTest !== undefined`))
	}
	clientA, clientB := canonEval(t, a, start), canonEval(t, b, start)
	if clientA == clientB {
		t.Fatalf("both tabs are client %s: each needs its own", clientA)
	}
	a.Do(t, "online", testenv.Until(`window.canonTest.status() === "online"`))
	b.Do(t, "online", testenv.Until(`window.canonTest.status() === "online"`))
	if o := canonEval(t, a, `put("notes", "shared", {text: ""})`); !bytes.Contains([]byte(o), []byte(`applied`)) {
		t.Fatalf("seed: %s", o)
	}
	converged := func(what string) {
		t.Helper()
		for _, tb := range []*testenv.Tab{a, b} {
			tb.Do(t, what, testenv.Until(`window.canonTest.pending() === 0`))
		}
		want := canonView(t, s, "tabs")
		var head struct{ Version int }
		if err := json.Unmarshal(want, &head); err != nil {
			t.Fatal(err)
		}
		for _, tb := range []*testenv.Tab{a, b} {
			tb.Do(t, what, testenv.Until(`window.canonTest.version() >= `+strconv.Itoa(head.Version)))
			var v string
			if err := json.Unmarshal([]byte(canonEval(t, tb, "view()")), &v); err != nil {
				t.Fatal(err)
			}
			if got := normalize(t, []byte(v)); !bytes.Equal(got, want) {
				t.Fatalf("%s: %s: the tab's view\n %s\nCanon's\n %s", what, tb.Name, got, want)
			}
			// The React view (useQuery) shows the same.
			tb.Do(t, what+": React view", testenv.Until(`window.canonTest.rendered() === window.canonTest.expected()`))
		}
	}

	t.Logf("tab A: mutate -> subscriber %s ms (median of 500)", canonEval(t, a, "localLatency(500)"))

	// Edit in A -> seen by B's subscriber, 200 times, one at a time.
	canonEval(t, b, "watch()")
	var lat []float64
	for i := range 200 {
		var t0, t1 float64
		if err := json.Unmarshal([]byte(canonEval(t, a, fmt.Sprintf("edit(%d)", i))), &t0); err != nil {
			t.Fatal(err)
		}
		b.Do(t, "see the edit", testenv.Until(fmt.Sprintf("window.canonTest.seenAt(%d) > 0", i)))
		if err := json.Unmarshal([]byte(canonEval(t, b, fmt.Sprintf("seenAt(%d)", i))), &t1); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, t1-t0)
	}
	slices.Sort(lat)
	t.Logf("edit in tab A -> tab B's subscriber, 200 edits: p50 %.1f ms, p99 %.1f ms, max %.1f ms", lat[100], lat[198], lat[199])

	// Concurrent edits: 100 mutations each, at once.
	canonEval(t, a, `edits("a", 50)`)
	canonEval(t, b, `edits("b", 50)`)
	converged("concurrent edits")

	// A goes offline and makes 500 edits (1,000 mutations); B makes 100
	// meanwhile, whose versions A rebases its 1,000 pending ones on.
	a.Do(t, "go offline", testenv.Offline(true), testenv.Until(`window.canonTest.status() === "offline"`))
	if n := canonEval(t, a, `edits("o", 500)`); n != "1000" {
		t.Fatalf("pending offline: %s", n)
	}
	t.Logf("tab A offline: rebase of its 1,000 pending mutations %s ms (median of 7)", canonEval(t, a, "rebaseTime()"))
	canonEval(t, b, `edits("p", 50)`)
	b.Do(t, "B's edits", testenv.Until(`window.canonTest.pending() === 0`))
	if p := canonEval(t, a, "pending()"); p != "1000" {
		t.Fatalf("A pushed while offline: %s pending", p)
	}
	a.Do(t, "back online", testenv.Offline(false))
	converged("after offline edits")

	// Canon refuses note.bump (it does not know it): the change goes.
	var rb struct {
		Before, After bool
		O             struct{ Status, Code string }
	}
	var rbText string
	if err := json.Unmarshal([]byte(canonEval(t, a, "rollback()")), &rbText); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(rbText), &rb); err != nil || !rb.Before || rb.After || rb.O.Status != "error" || rb.O.Code != "unknown_mutator" {
		t.Fatalf("rollback: %s", rbText)
	}

	// A reloads in the middle of pushing 100 mutations (50 edits): once
	// the first of their outcomes is in (the client pushes a mutation
	// only once IndexedDB holds it).
	before := canonEval(t, a, "outcomes()")
	canonEval(t, a, `edits("r", 50)`)
	a.Do(t, "reload", testenv.Until(`window.canonTest.outcomes() > `+before), chromedp.Reload(), testenv.Until(`window.canonTest !== undefined`))
	if again := canonEval(t, a, start); again != clientA {
		t.Fatalf("after the reload tab A is client %s, not %s", again, clientA)
	}
	t.Logf("tab A reloaded with %s of its 100 mutations pending", canonEval(t, a, "pending()"))
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

// The client in Chromium against a real Canon, when the socket does not
// continue the view it holds: a client whose IndexedDB holds version 1000
// of a branch at version 3 (as after Canon's topics were recreated) is
// answered with a reset and reloads the branch, dropping what Canon does
// not have; a version message lost on the socket (dropped by the page) is
// a gap, after which the client resumes from the version it holds and
// gets the lost one. The view is Canon's after each.
func TestBrowserGapAndReset(t *testing.T) {
	chromium := testenv.Chromium(t)
	dir := project(t)
	npm(t, dir, nil, "run", "--silent", "test-page")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := stack(t, func(mux *http.ServeMux) {
		mux.Handle("/client-test/", http.StripPrefix("/client-test/", http.FileServer(http.Dir(filepath.Join(dir, "build", "browser")))))
	})
	tok := token(t, s, "user:ann")
	const proj = "gapreset"
	// Three versions before the page opens.
	bot := client.New(s.URL, client.WithToken(tok))
	for i := 1; i <= 3; i++ {
		res, err := bot.Push(ctx, "acme", proj, client.Push{ClientGroup: "bots", Mutations: []client.Mutation{
			{Client: "bot", ID: uint64(i), Name: "item.put", Args: json.RawMessage(fmt.Sprintf(`{"collection":"notes","id":"n%d","data":{"i":%d}}`, i, i))}}},
			client.PushOptions{Wait: true})
		if err != nil || len(res.Outcomes) != 1 || res.Outcomes[0].Status != client.Applied {
			t.Fatalf("seed %d: %+v %v", i, res, err)
		}
	}
	deadline, _ := ctx.Deadline()
	tb := testenv.OpenTabs(t, chromium, deadline, []string{"tab"})[0]
	tb.Do(t, "open", chromedp.Navigate(s.URL+"/client-test/index.html"), testenv.Until(`window.canonTest !== undefined`))
	canonEval(t, tb, fmt.Sprintf("startFaulty(%q, %q, %q)", s.URL, tok, proj))

	same := func(what string, version int) {
		t.Helper()
		tb.Do(t, what, testenv.Until(`window.canonTest.version() === `+strconv.Itoa(version)), testenv.Until(`window.canonTest.pending() === 0`))
		want := canonView(t, s, proj)
		var v string
		if err := json.Unmarshal([]byte(canonEval(t, tb, "view()")), &v); err != nil {
			t.Fatal(err)
		}
		if got := normalize(t, []byte(v)); !bytes.Equal(got, want) {
			t.Fatalf("%s: the tab's view\n %s\nCanon's\n %s", what, got, want)
		}
	}
	// from=1000 is ahead of head 3: Canon resets, the client loads version 3.
	same("after the reset", 3)
	if ev := canonEval(t, tb, "events()"); ev != `"[\"state:storage:1000\",\"state:reset:3\"]"` {
		t.Fatalf("events of the reset: %s", ev)
	}

	// The page drops the next version message (the tab's own edit, v4);
	// v5 then arrives after v3: a gap. The client resumes from 3 and gets both.
	canonEval(t, tb, "dropNextVersion()")
	canonEval(t, tb, `putLater("notes", "g1", {gap: 1})`)
	tb.Do(t, "a version dropped", testenv.Until(`window.canonTest.dropped() === 1`))
	if v := canonEval(t, tb, "version()"); v != "3" {
		t.Fatalf("the client applied a version it never got: at %s", v)
	}
	res, err := bot.Push(ctx, "acme", proj, client.Push{ClientGroup: "bots", Mutations: []client.Mutation{
		{Client: "bot", ID: 4, Name: "item.put", Args: json.RawMessage(`{"collection":"notes","id":"g2","data":{"gap":2}}`)}}},
		client.PushOptions{Wait: true})
	if err != nil || res.Outcomes[0].Status != client.Applied {
		t.Fatalf("push after the drop: %+v %v", res, err)
	}
	same("after the gap", 5)
	if errs := canonEval(t, tb, "clientErrors()"); !bytes.Contains([]byte(errs), []byte("version_gap")) {
		t.Fatalf("the client did not report the gap: %s", errs)
	}
	var ev []string
	var evText string
	if err := json.Unmarshal([]byte(canonEval(t, tb, "events()")), &evText); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(evText), &ev); err != nil || !slices.Equal(ev[2:], []string{"version:4", "version:5"}) {
		t.Fatalf("versions after the gap: %s", evText)
	}
	if errs := tb.Exceptions(); len(errs) > 0 {
		t.Errorf("the page threw: %v", errs)
	}
}
