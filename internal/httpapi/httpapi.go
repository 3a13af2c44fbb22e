// Package httpapi holds what Canon's HTTP APIs (push, reads, the
// websocket's errors) share: how error answers (wire.Error, whose codes
// wire lists) and other JSON answers are written, and CORS.
package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/wire"
)

// WriteError writes e as {"error": e}, never cached, with Retry-After and
// WWW-Authenticate where they apply.
func WriteError(w http.ResponseWriter, e *wire.Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="canon"`)
	}
	if e.RequestID != "" {
		w.Header().Set("X-Request-Id", e.RequestID)
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, e.Status, wire.ErrorAnswer{Error: e})
}

// Internal is the answer to a failure of the server's own making (a store
// or Kafka error, 500 or 503): err goes to log with a new request id and
// attrs (what was being done), the answer carries message, the id and
// hint, never err's text, which names files, brokers and addresses that
// are no business of a client's.
func Internal(log *slog.Logger, status int, code, message, hint string, err error, attrs ...any) *wire.Error {
	id := NewRequestID()
	log.Error(message, append([]any{"request_id", id, "status", status, "err", err}, attrs...)...)
	return &wire.Error{Status: status, Code: code, RequestID: id, Hint: hint,
		Message: message + " (request id " + id + ": the server's log has the details)"}
}

// NewRequestID returns a random id for a request, 16 hex digits.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}

// WriteJSON writes v as the JSON body of a status answer.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// AuthHints are what an API tells a client to do about a missing token
// and about one that does not reach what it asked for.
type AuthHints struct {
	NoToken, Forbidden string
}

// AuthError maps a token error to 401 or 403.
func AuthError(err error, hints AuthHints) *wire.Error {
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return &wire.Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthenticated, Message: "no token", Hint: hints.NoToken}
	case errors.Is(err, auth.ErrForbidden):
		return &wire.Error{Status: http.StatusForbidden, Code: wire.CodeForbidden, Message: err.Error(), Hint: hints.Forbidden}
	default:
		return &wire.Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthenticated, Message: err.Error(),
			Hint: "get a valid, unexpired token"}
	}
}

// Routes serves mux, and answers the requests it has no route for as
// the APIs answer their errors: JSON, 404 no_route for a path no
// endpoint has, 405 method_not_allowed (with Allow) for a method the
// endpoint does not take, instead of the mux's plain text. Its
// redirects (a path to clean, a missing trailing slash) stay as they are.
func Routes(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // sets the request's pattern and path values
			return
		}
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			WriteError(w, &wire.Error{Status: http.StatusNotFound, Code: wire.CodeNoRoute,
				Message: "no endpoint at " + r.URL.Path,
				Hint:    "check the path against the API reference (docs/openapi.yaml); paths start with /v1/"})
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			WriteError(w, &wire.Error{Status: http.StatusMethodNotAllowed, Code: wire.CodeMethod,
				Message: r.Method + " is not a method of " + r.URL.Path,
				Hint:    "use " + allow})
		default:
			maps.Copy(w.Header(), rec.header)
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body)
		}
	})
}

// recorder keeps what the mux answers a request it has no route for.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	r.body = append(r.body, b...)
	return len(b), nil
}
