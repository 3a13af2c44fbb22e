package cli

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

func TestDevAppBuildAndServe(t *testing.T) {
	a, err := buildDevApp(&devAppFlags{dir: "../examples/todo/app", mutators: "../examples/todo/mutators.ts", project: "todo"})
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile("../examples/todo/mutators.js")
	if err != nil {
		t.Fatal(err)
	}
	// The hash the app is told is the deployed bytes' hash: those of
	// mutators.js, the committed build of mutators.ts.
	if a.hash != schemas.BundleHash(js) {
		t.Errorf("bundle hash %s, want mutators.js's %s", a.hash, schemas.BundleHash(js))
	}
	for path, want := range map[string]string{
		"/app/":              `<script type="module" src="app.js">`,
		"/app/index.html":    `<script src="app-config.js">`,
		"/app/app-config.js": `window.CANON_APP = {"org":"dev","project":"todo","bundleHash":"` + a.hash + `"};`,
		"/app/app.js":        `todo.rename`, // the mutators are bundled in
		"/app/style.css":     `#board`,
	} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d %.200q, want it to contain %q", path, rec.Code, rec.Body.String(), want)
		}
	}
	for path, code := range map[string]int{"/app/tsconfig.json": 404, "/app/app.ts": 404, "/app/nope.js": 404} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != code {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, code)
		}
	}
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/app/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /app/: %d", rec.Code)
	}
}

func TestDevAppRefusesWhatCannotRun(t *testing.T) {
	noEntry := t.TempDir()
	if err := os.WriteFile(filepath.Join(noEntry, "index.html"), []byte("<p>hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir()
	for name, body := range map[string]string{"index.html": "<p>hi", "app.ts": "import {x} from './missing.ts';\nconsole.log(x);\n"} {
		if err := os.WriteFile(filepath.Join(broken, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		flags devAppFlags
		want  string
		usage bool
	}{
		{"mutators without app", devAppFlags{mutators: "m.ts", project: "app"}, "--app-mutators needs --app", true},
		{"no folder", devAppFlags{dir: filepath.Join(noEntry, "nope"), project: "app"}, "pass the folder of the app", false},
		{"no entry", devAppFlags{dir: noEntry, project: "app"}, "needs index.html and an entry app.ts", true},
		{"bad project", devAppFlags{dir: broken, project: "a/b"}, `--app-project "a/b": pass a project name without /`, true},
		{"build error", devAppFlags{dir: broken, project: "app"}, `app.ts:1:`, false},
		{"bad mutators", devAppFlags{dir: noEntry, mutators: filepath.Join(noEntry, "none.ts"), project: "app"}, "--app-mutators: build", false},
	} {
		_, err := buildDevApp(&c.flags)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
			continue
		}
		var ue usageError
		if errors.As(err, &ue) != c.usage {
			t.Errorf("%s: %v: usage error %t, want %t", c.name, err, !c.usage, c.usage)
		}
	}
	if a, err := buildDevApp(&devAppFlags{project: "app"}); a != nil || err != nil {
		t.Errorf("without --app: %v, %v", a, err)
	}
}
