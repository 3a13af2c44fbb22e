package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

var (
	// readmeSnippet is the README's websocket snippet for a browser
	// console or a node prompt.
	readmeSnippet = regexp.MustCompile("(?s)paste\\s+this\\s+into\\s+the\\s+developer\\s+console.*?```js\n(.*?)```")
	// readmeNode20 is how the README says to run it on Node 20.
	readmeNode20 = regexp.MustCompile("(?s)on\\s+Node\\s+20,[^.]*?`(node [^`]*)`")
)

// The README's websocket snippet works as it says in Node, with the
// command line it gives for the Node at hand (Node 20 has WebSocket only
// behind a flag): it subscribes, and its edit() splices the note the
// README's first push made.
func TestREADMEWebsocketSnippet(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("node is not installed: the README's websocket snippet runs in Node 20+")
		}
		t.Skip("node is not installed: the README's websocket snippet runs in Node 20+")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := readmeSnippet.FindSubmatch(readme)
	if m == nil {
		t.Fatal("the README has no websocket snippet after 'paste this into the developer console'")
	}
	ver, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
	if err != nil {
		t.Fatal(err)
	}
	major, _ := strconv.Atoi(strings.TrimSpace(string(ver)))
	args := []string{}
	if major < 22 {
		c := readmeNode20.FindSubmatch(readme)
		if c == nil {
			t.Fatalf("the README says how to run its websocket snippet on Node 22 or later, and this is Node %d", major)
		}
		args = strings.Fields(string(c[1]))[1:]
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl := startPipeline(t, 2)
	base := startUIServer(t, ctx, pl)
	token := pl.token(t, "ann", "*")
	// The README's first push.
	if o := push(t, base, token, "demo", "cg-1", map[string]any{"client": "c-1", "id": 1, "name": "item.put",
		"args": map[string]any{"collection": "notes", "id": "n1", "data": map[string]any{"text": "hello"}}}); o[0].Status != "applied" {
		t.Fatalf("the README's first push: %+v", o)
	}
	snippet := strings.NewReplacer(
		`const TOKEN = "…"`, `const TOKEN = "`+token+`"`,
		"ws://127.0.0.1:8080", "ws"+strings.TrimPrefix(base, "http"),
		"/v1/projects/dev/demo/", "/v1/projects/acme/demo/",
	).Replace(string(m[1]))
	// What a person does next: edit once the socket is open, and watch
	// the version that applied it arrive.
	script := snippet + `
await new Promise((resolve) => ws.addEventListener("open", resolve));
edit("hi from node, ");
await new Promise((resolve, reject) => ws.addEventListener("message", (e) => {
  const m = JSON.parse(e.data);
  if (m.type === "version" && m.version === 2) resolve();
  if (m.type === "error" || m.type === "rejected") reject(new Error(e.data));
}));
ws.close();
`
	cmd := exec.CommandContext(ctx, node, append(args, "--input-type=module", "-e", script)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s with the README's snippet: %v\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/projects/acme/demo/items/notes/n1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var item struct{ Data map[string]any }
	if err := json.Unmarshal(body, &item); err != nil || item.Data["text"] != "hi from node, hello" {
		t.Fatalf("n1 after the snippet's edit: %d %s", resp.StatusCode, body)
	}
}
