package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/model/bundle"
)

// appPrefix is where canon dev serves an app given with --app.
const appPrefix = "/app/"

// devAppFlags are canon dev's flags for serving a web app beside Canon,
// with its mutator bundle deployed: one command runs an example app.
type devAppFlags struct {
	dir      string
	mutators string
	project  string
}

func (f *devAppFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.dir, "app", "",
		"a web app to serve at /app/: a folder with index.html and app.ts (or app.tsx, app.js), bundled with esbuild at start")
	fs.StringVar(&f.mutators, "app-mutators", "",
		"with --app: the app's mutator bundle (.ts entry or built .js), deployed for the app's project at start; the app gets its hash")
	fs.StringVar(&f.project, "app-project", "app", "with --app: the app's project, in org dev")
}

// devApp is a built app: its static files and what it is told at start.
type devApp struct {
	files   map[string][]byte // by path under /app/
	bundle  []byte            // the mutator bundle to deploy; nil without --app-mutators
	hash    string            // its hash
	project string
}

// appConfig is what the app finds in window.CANON_APP (app-config.js,
// loaded by its index.html before app.js): where and as what to run.
type appConfig struct {
	Org        string `json:"org"`
	Project    string `json:"project"`
	BundleHash string `json:"bundleHash,omitempty"`
}

// buildDevApp reads and builds the app of --app: its entry (app.ts,
// app.tsx or app.js) bundled for browsers into app.js with what it
// imports (a tsconfig.json beside it may map package names to paths),
// the other files of the folder as they are, and app-config.js.
func buildDevApp(f *devAppFlags) (*devApp, error) {
	if f.dir == "" {
		if f.mutators != "" {
			return nil, usageError{errors.New("--app-mutators needs --app: the folder of the app that runs them")}
		}
		return nil, nil
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, err
	}
	a := &devApp{files: map[string][]byte{}, project: f.project}
	if err := checkAppProject(f.project); err != nil {
		return nil, err
	}
	if f.mutators != "" {
		if a.bundle, err = readBundleFile(f.mutators, false); err != nil {
			return nil, fmt.Errorf("--app-mutators: %w", err)
		}
		sum := sha256.Sum256(a.bundle)
		a.hash = hex.EncodeToString(sum[:])
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--app %s: %w (pass the folder of the app: index.html and app.ts)", f.dir, err)
	}
	entry := ""
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		switch name {
		case "app.ts", "app.tsx", "app.js":
			if entry == "" || name != "app.js" {
				entry = name
			}
			continue
		case "tsconfig.json", "app-config.js":
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		a.files[name] = b
	}
	if a.files["index.html"] == nil || entry == "" {
		return nil, usageError{fmt.Errorf("--app %s: the folder needs index.html and an entry app.ts (or app.tsx, app.js)", f.dir)}
	}
	if a.files["app.js"], err = bundle.BuildApp(filepath.Join(dir, entry)); err != nil {
		return nil, fmt.Errorf("--app: %w", err)
	}
	cfg, err := json.Marshal(appConfig{Org: "dev", Project: f.project, BundleHash: a.hash})
	if err != nil {
		return nil, err
	}
	a.files["app-config.js"] = []byte("window.CANON_APP = " + string(cfg) + ";\n")
	return a, nil
}

// checkAppProject refuses a project name a URL path cannot carry as one
// segment.
func checkAppProject(p string) error {
	if p == "" || strings.ContainsAny(p, "/?#% ") {
		return usageError{fmt.Errorf("--app-project %q: pass a project name without /, ?, #, %% or spaces", p)}
	}
	return nil
}

// ServeHTTP serves the app's files under /app/ (index.html for /app/).
// They are rebuilt only by a restart: no-cache makes a reload fetch them.
func (a *devApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, appPrefix)
	if name == "" {
		name = "index.html"
	}
	b, ok := a.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// deploy deploys the app's bundle for its project through the server's
// own deploy endpoint and waits until the sequencer has activated it, so
// that the app's first check finds it.
func (a *devApp) deploy(ctx context.Context, base, token string, out io.Writer) error {
	if a.bundle == nil {
		return nil
	}
	f := &mutatorsFlags{url: base, token: token, org: "dev", project: a.project, wait: time.Minute}
	var log bytes.Buffer
	if err := f.deploy(ctx, &log, a.bundle); err != nil {
		return fmt.Errorf("deploy the app's mutators (--app-mutators): %w", err)
	}
	fmt.Fprintf(out, "  app bundle  %s, active in dev/%s\n", a.hash, a.project)
	return nil
}
