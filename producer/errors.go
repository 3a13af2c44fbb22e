package producer

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/schemas"
)

// Error codes of the push API. Each response with an error carries one, a
// message, the field at fault when there is one, and what to do.
const (
	CodeMalformed        = "malformed_json"            // 400: the body is not the JSON the endpoint takes
	CodeInvalid          = "invalid_field"             // 400: a field is missing, of the wrong type or out of range
	CodeEmptyBatch       = "empty_batch"               // 400: no mutations
	CodeUnauthenticated  = httpapi.CodeUnauthenticated // 401: no token, or a bad or expired one
	CodeForbidden        = httpapi.CodeForbidden       // 403: the token does not reach the org, project or scope
	CodeTooLarge         = "too_large"                 // 413: over a size or count limit
	CodeRequestTimeout   = "request_timeout"           // 408: the body did not arrive within the server's read timeout
	CodeUnsupportedMedia = "unsupported_media"         // 415: not application/json
	CodeRateLimited      = "rate_limited"              // 429: over the principal's rate; retry after Retry-After
	CodeUnavailable      = "kafka_unavailable"         // 503: the records could not be written; retry
	CodeVersion          = "unsupported_version"       // 400: a Replicache pushVersion other than 1
	CodeGroupOwned       = "client_group_owned"        // 409: the client group belongs to another principal
	CodeClientOwned      = "client_in_other_group"     // 409: the client belongs to another client group
	CodeNoWait           = "wait_unavailable"          // 501: this producer does not follow the changelog
)

// Error is the JSON error answer of the push endpoints (and of Push).
type Error = httpapi.Error

var writeError = httpapi.WriteError

// writeJSON writes a push answer, which is never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteJSON(w, status, v)
}

var pushAuthHints = httpapi.AuthHints{
	NoToken:   "send 'Authorization: Bearer TOKEN' (canon token issue makes one)",
	Forbidden: "use a token issued for this org, project and scope",
}

// authError maps a token error to 401 or 403.
func authError(err error) *Error { return httpapi.AuthError(err, pushAuthHints) }

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
