package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/canon-sync/canon/wire"
)

// CORS lets browser apps of other origins use Canon's APIs: it answers
// preflight requests and marks the answers to allowed origins. Canon
// authenticates with bearer tokens, never cookies, so credentials are not
// allowed: a page of an allowed origin can only use a token it holds.
//
// An origin is allowed when it matches one of the configured patterns:
// "*" (any origin), an exact origin ("https://app.example.com"), or an
// origin whose port is "*" ("http://localhost:*", any port, or none).
type CORS struct {
	any      bool
	patterns []originPattern
}

// originPattern is scheme://host[:port]; port "*" matches any port.
type originPattern struct {
	scheme, host, port string
}

// CORS answers.
const (
	// CORSMaxAge is how long, in seconds, a browser may cache a preflight
	// answer (Chromium caps it at 2 hours).
	CORSMaxAge = 7200
	// corsMethods are the methods of Canon's APIs.
	corsMethods = "GET, POST"
	// corsHeaders are the request headers browser apps send: the token,
	// the JSON body, the request id of Replicache's push and pull, and
	// the ETag of a cached read to revalidate.
	corsHeaders = "Authorization, Content-Type, X-Replicache-RequestID, If-None-Match"
	// corsExposed are the answer headers a page may read besides the
	// simple ones.
	corsExposed = "ETag, Retry-After, WWW-Authenticate"
)

// NewCORS parses allowed origin patterns (see CORS); none allows no other
// origin, and same-origin requests need none.
func NewCORS(origins []string) (*CORS, error) {
	c := &CORS{}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == "*" {
			c.any = true
			continue
		}
		p, err := parseOriginPattern(o)
		if err != nil {
			return nil, err
		}
		c.patterns = append(c.patterns, p)
	}
	return c, nil
}

func parseOriginPattern(s string) (originPattern, error) {
	bad := func(why string) (originPattern, error) {
		return originPattern{}, fmt.Errorf("allowed origin %q %s: use scheme://host[:port], e.g. https://app.example.com or http://localhost:* (any port), or * for any origin", s, why)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return bad("has no http:// or https:// scheme")
	}
	if rest == "" || strings.ContainsAny(rest, "/?#@ ") {
		return bad("is not an origin (no path, query or user)")
	}
	host, port := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.HasSuffix(rest, "]") {
		host, port = rest[:i], rest[i+1:]
		if port != "*" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return bad("has an invalid port")
			}
		}
	}
	if host == "" {
		return bad("has no host")
	}
	if strings.Contains(host, "*") {
		return bad("has a * in its host (only the port may be *)")
	}
	return originPattern{scheme: scheme, host: strings.ToLower(host), port: port}, nil
}

// Allowed reports whether a request from origin (an Origin header) may
// use the APIs.
func (c *CORS) Allowed(origin string) bool {
	if origin == "" || origin == "null" {
		return false
	}
	if c.any {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // an IPv6 literal, as patterns spell it
	}
	for _, p := range c.patterns {
		if p.scheme == u.Scheme && p.host == host && (p.port == "*" || p.port == port) {
			return true
		}
	}
	return false
}

// CheckOrigin is the origin check of websocket upgrades: a request with no
// Origin (not from a browser), one from the server's own origin, or one
// from an allowed origin.
func (c *CORS) CheckOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if u, err := url.Parse(origin); err == nil && strings.EqualFold(u.Host, r.Host) {
		return true
	}
	return c.Allowed(origin)
}

// Handler answers preflight requests (OPTIONS with
// Access-Control-Request-Method) itself, 204 for an allowed origin and
// 403 otherwise, and adds Access-Control-Allow-Origin to the answers of
// next to allowed origins. Every answer varies by Origin, so that a cache
// never serves one origin's answer to another.
func (c *CORS) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			if !c.Allowed(origin) {
				WriteError(w, &wire.Error{Status: http.StatusForbidden, Code: wire.CodeOriginNotAllowed,
					Message: fmt.Sprintf("origin %q may not use this server", origin),
					Hint:    "add it to the server's allowed origins (--cors-origins)"})
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Methods", corsMethods)
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", strconv.Itoa(CORSMaxAge))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if c.Allowed(origin) {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", corsExposed)
		}
		next.ServeHTTP(w, r)
	})
}
