package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/internal/testenv"
)

// corsApp is a browser app's page: run(base, token, project) uses every
// kind of Canon request a browser app makes, from the page's own origin,
// and resolves to what each answered (or the error the browser gave).
const corsApp = `<!doctype html>
<html><head><meta charset="utf-8"><title>app</title></head><body>
<script>
async function call(what, url, init) {
  try {
    const r = await fetch(url, init);
    return {what, status: r.status, body: await r.text()};
  } catch (e) {
    return {what, error: String(e)};
  }
}
// socket subscribes and resolves on the first version (or on hello when
// no version is to come: the push failed).
function socket(url, versionToCome) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url);
    const seen = [];
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data);
      seen.push(m.type);
      if (m.type === "version" || !versionToCome) { ws.close(); resolve({what: "ws", seen}); }
    };
    ws.onclose = (e) => resolve({what: "ws", seen, closed: e.code});
  });
}
async function run(base, token, project) {
  const p = base + "/v1/projects/acme/" + project;
  const json = {"Authorization": "Bearer " + token, "Content-Type": "application/json"};
  const out = [];
  out.push(await call("push", p + "/push?wait=applied", {method: "POST", headers: json,
    body: JSON.stringify({clientGroup: "web", mutations: [{client: "web-1", id: 1, name: "item.put",
      args: {collection: "notes", id: "n1", data: {text: "from the app"}}}]})}));
  out.push(await call("read", p + "/items/notes/n1", {headers: {"Authorization": "Bearer " + token}}));
  const rep = {...json, "X-Replicache-RequestID": "req-1"};
  out.push(await call("replicache-push", base + "/replicache/v1/acme/" + project + "/push", {method: "POST", headers: rep,
    body: JSON.stringify({pushVersion: 1, clientGroupID: "rep", profileID: "p", schemaVersion: "",
      mutations: [{clientID: "rep-1", id: 1, name: "item.put", args: {collection: "notes", id: "n2", data: 2}, timestamp: 12.5}]})}));
  out.push(await call("replicache-pull", base + "/replicache/v1/acme/" + project + "/pull", {method: "POST", headers: rep,
    body: JSON.stringify({pullVersion: 1, clientGroupID: "rep", cookie: null, profileID: "p", schemaVersion: ""})}));
  out.push(await socket(base.replace("http", "ws") + "/v1/projects/acme/" + project + "/ws?from=0&token=" + token, out[0].status === 200));
  return JSON.stringify(out);
}
</script></body></html>`

// appResult is what the page's run resolved to, per request.
type appResult struct {
	What   string   `json:"what"`
	Status int      `json:"status"`
	Body   string   `json:"body"`
	Error  string   `json:"error"`
	Seen   []string `json:"seen"`
	Closed int      `json:"closed"`
}

// A browser app served from another origin uses Canon from headless
// Chromium: an allowed origin pushes (Canon's and Replicache's push),
// reads, pulls and subscribes; another origin (another port of the same
// host) gets none of it, and its websocket upgrade is refused.
func TestBrowserAppOfAnotherOrigin(t *testing.T) {
	chromium := testenv.Chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := startPipeline(t, 2)

	page := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(corsApp))
	})
	app := httptest.NewServer(page)
	defer app.Close()
	other := httptest.NewServer(page)
	defer other.Close()
	cors, err := httpapi.NewCORS([]string{app.URL})
	if err != nil {
		t.Fatal(err)
	}
	base := startServer(t, ctx, pl, cors)
	token := pl.token(t, "ann", "*")

	deadline, _ := ctx.Deadline()
	tb := testenv.OpenTabs(t, chromium, deadline, []string{"app"})[0]
	runApp := func(origin, project string) map[string]appResult {
		t.Helper()
		tb.Do(t, "open "+origin, chromedp.Navigate(origin+"/"), testenv.Until(`typeof run === "function"`))
		raw := eval(t, tb, fmt.Sprintf(`run(%q, %q, %q)`, base, token, project))
		var rs []appResult
		if err := json.Unmarshal([]byte(raw), &rs); err != nil {
			t.Fatalf("the page answered %s: %v", raw, err)
		}
		out := map[string]appResult{}
		for _, r := range rs {
			out[r.What] = r
		}
		return out
	}

	got := runApp(app.URL, "cors")
	for what, ok := range map[string]func(r appResult) bool{
		"push":            func(r appResult) bool { return r.Status == 200 && strings.Contains(r.Body, `"status":"applied"`) },
		"read":            func(r appResult) bool { return r.Status == 200 && strings.Contains(r.Body, "from the app") },
		"replicache-push": func(r appResult) bool { return r.Status == 200 && strings.TrimSpace(r.Body) == "{}" },
		"replicache-pull": func(r appResult) bool { return r.Status == 200 && strings.Contains(r.Body, `"cookie"`) },
		"ws": func(r appResult) bool {
			return len(r.Seen) >= 2 && r.Seen[0] == "hello" && r.Seen[len(r.Seen)-1] == "version"
		},
	} {
		if r := got[what]; !ok(r) {
			t.Errorf("from the allowed origin %s, %s: %+v", app.URL, what, r)
		}
	}

	got = runApp(other.URL, "other")
	for _, what := range []string{"push", "read", "replicache-push", "replicache-pull"} {
		if r := got[what]; r.Error == "" {
			t.Errorf("from the origin %s, which is not allowed, %s was let through: %+v", other.URL, what, r)
		}
	}
	if r := got["ws"]; len(r.Seen) != 0 || r.Closed != 1006 {
		t.Errorf("from the origin %s, which is not allowed, the websocket: %+v", other.URL, r)
	}
	if errs := tb.Exceptions(); len(errs) > 0 {
		t.Errorf("the page threw: %s", strings.Join(errs, "\n"))
	}
	// Nothing of the refused origin reached Canon: its pushes were
	// stopped by the preflight.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/projects/acme/other", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("project other, pushed to only from the refused origin: %d, want 404", resp.StatusCode)
	}
	// The upgrade's refusal is the server's, not the browser's.
	h := http.Header{"Origin": {other.URL}}
	wsURL := strings.Replace(base, "http", "ws", 1) + "/v1/projects/acme/cors/ws?token=" + token
	if c, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL, h); err == nil {
		c.Close()
		t.Errorf("the websocket upgrade from %s was accepted", other.URL)
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("the websocket upgrade from %s: %v", other.URL, err)
	}
}
