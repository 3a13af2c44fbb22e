// Package httpapi holds what Canon's HTTP APIs (push, reads, the
// websocket's errors) share: the shape of an error answer and how JSON
// answers are written.
//
// Every error answer is {"error": {"code", "message", "field", "hint"}}:
// code says what went wrong (each API documents its codes), message the
// details, field the parameter or body field at fault, hint what to do.
package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/internal/auth"
)

// Codes every API uses.
const (
	CodeUnauthenticated = "unauthenticated" // 401: no token, or a bad or expired one
	CodeForbidden       = "forbidden"       // 403: the token does not reach the org, project or scope
)

// Error is an API's JSON error answer.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Hint    string `json:"hint,omitempty"`
	// RetryAfter, in seconds, is sent as Retry-After (429 and 503).
	RetryAfter int `json:"-"`
	// RequestID names a failure of the server's own making in its log
	// (Internal); it is also sent as X-Request-Id.
	RequestID string `json:"requestId,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// WriteError writes e as {"error": e}, never cached, with Retry-After and
// WWW-Authenticate where they apply.
func WriteError(w http.ResponseWriter, e *Error) {
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
	WriteJSON(w, e.Status, map[string]*Error{"error": e})
}

// Internal is the answer to a failure of the server's own making (a store
// or Kafka error, 500 or 503): err goes to log with a new request id and
// attrs (what was being done), the answer carries message, the id and
// hint, never err's text, which names files, brokers and addresses that
// are no business of a client's.
func Internal(log *slog.Logger, status int, code, message, hint string, err error, attrs ...any) *Error {
	id := NewRequestID()
	log.Error(message, append([]any{"request_id", id, "status", status, "err", err}, attrs...)...)
	return &Error{Status: status, Code: code, RequestID: id, Hint: hint,
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
func AuthError(err error, hints AuthHints) *Error {
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "no token", Hint: hints.NoToken}
	case errors.Is(err, auth.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: err.Error(), Hint: hints.Forbidden}
	default:
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: err.Error(),
			Hint: "get a valid, unexpired token"}
	}
}
