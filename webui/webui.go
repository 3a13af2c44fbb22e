// Package webui serves Canon's web UI: plain HTML, CSS and JavaScript
// modules under assets/, embedded in the binary (no build step at build
// time or at run time). assets/canon.js is the TypeScript client's
// browser build, generated (go generate ./webui) and committed; a test
// checks it is current. The UI talks to Canon only through its public
// read API, push API and websocket, with a token the user pastes or
// passes in the URL's fragment (#token=…), so it can be served by any
// instance that serves the read API. docs/ui.md describes it.
package webui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:generate go run ./internal/genclient

// Prefix is where Mount serves the UI.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// contentTypes are the types of the files under assets/, by extension. A
// file of another extension is refused by New, so that nothing is served
// with a type the browser has to guess.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// contentSecurityPolicy allows the UI's own scripts, styles and
// connections (fetch and the websocket to the same host) only: no inline
// script, no third-party origin.
const contentSecurityPolicy = "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is an asset, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// UI serves the embedded assets.
type UI struct {
	files map[string]*file // by path under assets/
}

// New reads the embedded assets.
func New() (*UI, error) {
	return newUI(assets, "assets")
}

func newUI(fsys fs.FS, root string) (*UI, error) {
	u := &UI{files: map[string]*file{}}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("webui: asset %s has no known content type: give it one of the extensions in contentTypes", p)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		u.files[strings.TrimPrefix(p, root+"/")] = &file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if u.files["index.html"] == nil {
		return nil, fmt.Errorf("webui: no index.html under %s", root)
	}
	return u, nil
}

// Mount serves the UI under Prefix and redirects / to it.
func (u *UI) Mount(mux *http.ServeMux) {
	mux.Handle("GET "+Prefix, u)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusFound)
	})
}

// ServeHTTP serves one asset; Prefix itself is index.html. Every answer
// is revalidated (no-cache with an ETag of the bytes): a new binary
// serves new assets at the same names, and a page must never mix the
// modules of two versions.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	f := u.files[name]
	if f == nil {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, fmt.Sprintf("the web UI has no file %q: open %s", name, Prefix), http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if strings.HasSuffix(name, ".html") {
		h.Set("Content-Security-Policy", contentSecurityPolicy)
	}
	if match(r.Header.Get("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Length", fmt.Sprint(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body)
	}
}

// match reports whether an If-None-Match header names etag.
func match(inm, etag string) bool {
	for _, tag := range strings.Split(inm, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == etag || tag == "*" {
			return true
		}
	}
	return false
}
