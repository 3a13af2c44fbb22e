package webui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	u, err := New()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	u.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, method, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestAssets(t *testing.T) {
	srv := serve(t)
	for _, c := range []struct {
		path, contentType, contains string
	}{
		{"/ui/", "text/html; charset=utf-8", `<script type="module" src="app.js">`},
		{"/ui/index.html", "text/html; charset=utf-8", "<title>Canon</title>"},
		{"/ui/app.js", "text/javascript; charset=utf-8", "class ProjectView"},
		{"/ui/api.js", "text/javascript; charset=utf-8", "export const api"},
		{"/ui/live.js", "text/javascript; charset=utf-8", "export class Subscription"},
		{"/ui/diff.js", "text/javascript; charset=utf-8", "export function diffLines"},
		{"/ui/style.css", "text/css; charset=utf-8", ":root"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	} {
		resp, body := get(t, http.MethodGet, srv.URL+c.path)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Type") != c.contentType || !strings.Contains(body, c.contains) {
			t.Errorf("%s: %d %q, want 200 %q with %q", c.path, resp.StatusCode, h.Get("Content-Type"), c.contentType, c.contains)
			continue
		}
		if h.Get("Cache-Control") != "no-cache" || h.Get("ETag") == "" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", c.path, h)
		}
		if csp := h.Get("Content-Security-Policy"); strings.HasSuffix(c.contentType, "html; charset=utf-8") != (csp != "") {
			t.Errorf("%s: Content-Security-Policy %q", c.path, csp)
		}
		// Revalidation: the ETag answers 304 without the body; another
		// file's does not.
		resp2, body2 := get(t, http.MethodGet, srv.URL+c.path, "If-None-Match", h.Get("ETag"))
		if resp2.StatusCode != http.StatusNotModified || body2 != "" || resp2.Header.Get("ETag") != h.Get("ETag") {
			t.Errorf("%s with its ETag: %d %q", c.path, resp2.StatusCode, body2)
		}
		if resp3, _ := get(t, http.MethodGet, srv.URL+c.path, "If-None-Match", `"other"`); resp3.StatusCode != 200 {
			t.Errorf("%s with another ETag: %d", c.path, resp3.StatusCode)
		}
		// HEAD: the headers of GET, no body.
		if resp4, body4 := get(t, http.MethodHead, srv.URL+c.path); resp4.StatusCode != 200 || body4 != "" ||
			resp4.Header.Get("Content-Length") != h.Get("Content-Length") {
			t.Errorf("HEAD %s: %d %q %v", c.path, resp4.StatusCode, body4, resp4.Header)
		}
	}

	// / redirects to the UI; other paths are not the UI's.
	resp, _ := get(t, http.MethodGet, srv.URL+"/")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != Prefix {
		t.Errorf("/: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/ui/nope.js", "/ui/assets/app.js", "/other"} {
		if resp, body := get(t, http.MethodGet, srv.URL+p); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "export") {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, http.MethodPost, srv.URL+"/ui/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d", resp.StatusCode)
	}
}

// Every file the page and its modules refer to is embedded: a renamed
// module would otherwise break the UI only in a browser.
func TestReferencesResolve(t *testing.T) {
	u, err := New()
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#:]+)"|from "\./([^"]+)"`)
	checked := 0
	for name, f := range u.files {
		for _, m := range refs.FindAllStringSubmatch(string(f.body), -1) {
			ref := m[1] + m[2]
			if u.files[ref] == nil {
				t.Errorf("%s refers to %s, which is not embedded", name, ref)
			}
			checked++
		}
	}
	if checked < 6 {
		t.Fatalf("found only %d references: the pattern no longer matches the assets", checked)
	}
}

func TestNewRefusesUnknownTypes(t *testing.T) {
	fsys := fstest.MapFS{
		"a/index.html": {Data: []byte("<!doctype html>")},
		"a/data.bin":   {Data: []byte{1}},
	}
	if _, err := newUI(fsys, "a"); err == nil || !strings.Contains(err.Error(), "data.bin") {
		t.Fatalf("an asset of unknown type: %v", err)
	}
	if _, err := newUI(fstest.MapFS{"a/app.js": {Data: []byte("x")}}, "a"); err == nil || !strings.Contains(err.Error(), "index.html") {
		t.Fatalf("no index.html: %v", err)
	}
}
