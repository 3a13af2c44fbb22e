package httpapi

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/canon-sync/canon/wire"
)

func TestCORSAllowed(t *testing.T) {
	c, err := NewCORS([]string{"https://app.example.com", "http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*", "http://pinned.example:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for origin, want := range map[string]bool{
		"https://app.example.com":       true,
		"https://APP.example.com":       true,
		"http://app.example.com":        false, // another scheme
		"https://app.example.com:8443":  false, // another port
		"https://evil.app.example.com":  false,
		"http://localhost:5173":         true,
		"http://localhost":              true,
		"https://localhost:5173":        false,
		"http://127.0.0.1:40123":        true,
		"http://[::1]:3000":             true,
		"http://pinned.example:8443":    true,
		"http://pinned.example:8444":    false,
		"http://localhost.evil.com:80":  false,
		"null":                          false,
		"":                              false,
		"http://localhost:5173/path":    false,
		"http://user@localhost:5173":    false,
		"javascript://localhost:5173":   false,
		"http://127.0.0.1.nip.io:40123": false,
	} {
		if got := c.Allowed(origin); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", origin, got, want)
		}
	}
	anyOrigin, err := NewCORS([]string{"*"})
	if err != nil || !anyOrigin.Allowed("https://anything.example") || anyOrigin.Allowed("") {
		t.Errorf("*: %v", err)
	}
	none, err := NewCORS(nil)
	if err != nil || none.Allowed("http://localhost:5173") {
		t.Errorf("none: %v", err)
	}
}

func TestCORSBadPatterns(t *testing.T) {
	for _, p := range []string{"localhost:5173", "ftp://x.example", "https://x.example/app", "https://x.example:99999", "https://", "https://x.example:port", "http://*:80"} {
		_, err := NewCORS([]string{p})
		if err == nil {
			t.Errorf("%q accepted", p)
			continue
		}
		if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "scheme://host") {
			t.Errorf("%q: the error says neither the pattern nor what to use: %v", p, err)
		}
	}
}

func TestCORSHandler(t *testing.T) {
	c, err := NewCORS([]string{"http://localhost:*"})
	if err != nil {
		t.Fatal(err)
	}
	reached := 0
	h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusTeapot)
	}))
	do := func(method, origin string, preflight bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/v1/projects/acme/doc/push", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", "POST")
			r.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	// An allowed origin's preflight: answered here, with what it may send.
	rec := do(http.MethodOptions, "http://localhost:5173", true)
	hd := rec.Header()
	if rec.Code != http.StatusNoContent || hd.Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		!strings.Contains(hd.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(hd.Get("Access-Control-Allow-Headers"), "Content-Type") ||
		!strings.Contains(hd.Get("Access-Control-Allow-Headers"), "If-None-Match") ||
		!strings.Contains(hd.Get("Access-Control-Allow-Methods"), "POST") ||
		hd.Get("Access-Control-Max-Age") == "" || !slices.Contains(hd.Values("Vary"), "Origin") || reached != 0 {
		t.Fatalf("preflight: %d %v (handler reached %d times)", rec.Code, hd, reached)
	}
	// Another origin's preflight: refused, with why.
	rec = do(http.MethodOptions, "https://evil.example", true)
	if rec.Code != http.StatusForbidden || rec.Header().Get("Access-Control-Allow-Origin") != "" ||
		!strings.Contains(rec.Body.String(), wire.CodeOriginNotAllowed) || !strings.Contains(rec.Body.String(), "--cors-origins") || reached != 0 {
		t.Fatalf("refused preflight: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	// Requests go through; only an allowed origin's answer is marked.
	rec = do(http.MethodPost, "http://localhost:5173", false)
	if rec.Code != http.StatusTeapot || rec.Header().Get("Access-Control-Allow-Origin") != "http://localhost:5173" ||
		!slices.Contains(rec.Header().Values("Vary"), "Origin") {
		t.Fatalf("allowed: %d %v", rec.Code, rec.Header())
	}
	for _, origin := range []string{"https://evil.example", ""} {
		rec = do(http.MethodGet, origin, false)
		if rec.Code != http.StatusTeapot || rec.Header().Get("Access-Control-Allow-Origin") != "" ||
			!slices.Contains(rec.Header().Values("Vary"), "Origin") {
			t.Fatalf("origin %q: %d %v", origin, rec.Code, rec.Header())
		}
	}
	// OPTIONS that is no preflight is the API's to answer.
	if rec = do(http.MethodOptions, "", false); rec.Code != http.StatusTeapot {
		t.Fatalf("plain OPTIONS: %d", rec.Code)
	}
}

func TestCORSCheckOrigin(t *testing.T) {
	c, err := NewCORS([]string{"http://localhost:*"})
	if err != nil {
		t.Fatal(err)
	}
	for origin, want := range map[string]bool{
		"":                       true, // not a browser
		"http://canon.test:8080": true, // the server's own origin
		"http://localhost:5173":  true,
		"https://evil.example":   false,
		"http://canon.test:8081": false,
	} {
		r := httptest.NewRequest(http.MethodGet, "http://canon.test:8080/v1/projects/acme/doc/ws", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if got := c.CheckOrigin(r); got != want {
			t.Errorf("CheckOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
}
