package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
)

// Error codes of the push API. Each response with an error carries one, a
// message, the field at fault when there is one, and what to do.
const (
	CodeMalformed        = "malformed_json"      // 400: the body is not the JSON the endpoint takes
	CodeInvalid          = "invalid_field"       // 400: a field is missing, of the wrong type or out of range
	CodeEmptyBatch       = "empty_batch"         // 400: no mutations
	CodeUnauthenticated  = "unauthenticated"     // 401: no token, or a bad or expired one
	CodeForbidden        = "forbidden"           // 403: the token does not reach the org, project or scope
	CodeTooLarge         = "too_large"           // 413: over a size or count limit
	CodeUnsupportedMedia = "unsupported_media"   // 415: not application/json
	CodeRateLimited      = "rate_limited"        // 429: over the principal's rate; retry after Retry-After
	CodeUnavailable      = "kafka_unavailable"   // 503: the records could not be written; retry
	CodeVersion          = "unsupported_version" // 400: a Replicache pushVersion other than 1
	CodeGroupOwned       = "client_group_owned"  // 409: the client group belongs to another principal
	CodeNoWait           = "wait_unavailable"    // 501: this producer does not follow the changelog
)

// Error is the JSON error answer of the push endpoints (and of Push).
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Hint    string `json:"hint,omitempty"`
	// retryAfter, in seconds, for 429 and 503.
	retryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func writeError(w http.ResponseWriter, e *Error) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="canon"`)
	}
	writeJSON(w, e.Status, map[string]*Error{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// authError maps a token error to 401 or 403.
func authError(err error) *Error {
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "no token",
			Hint: "send 'Authorization: Bearer TOKEN' (canon token issue makes one)"}
	case errors.Is(err, auth.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: err.Error(),
			Hint: "use a token issued for this org, project and scope"}
	default:
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: err.Error(),
			Hint: "get a valid, unexpired token"}
	}
}

// fieldError maps a schemas validation error of mutation i to 400 or 413.
func fieldError(i int, err error) *Error {
	field := ""
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		field = fmt.Sprintf("mutations[%d].%s", i, fe.Field)
	}
	if errors.Is(err, schemas.ErrTooLarge) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Field: field, Message: err.Error(),
			Hint: "send smaller args; large items are split across several items"}
	}
	msg := err.Error()
	if fe != nil {
		msg = fe.Reason
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field, Message: msg}
}
