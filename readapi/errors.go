package readapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/canon-sync/canon/internal/auth"
)

// Error codes of the read API. Every error answer is
// {"error": {"code", "message", "field", "hint"}}, the shape of the push
// API's errors (producer/errors.go): code says what went wrong, message
// the details, field the parameter at fault, hint what to do.
const (
	CodeInvalid            = "invalid_field"        // 400: a path or query parameter is malformed or out of range
	CodeMalformed          = "malformed_json"       // 400: the body is not the JSON the endpoint takes
	CodeUnauthenticated    = "unauthenticated"      // 401: no token, or a bad or expired one
	CodeForbidden          = "forbidden"            // 403: the token does not reach the org, project or scope
	CodeBranchNotFound     = "branch_not_found"     // 404: the project has no such branch
	CodeVersionNotFound    = "version_not_found"    // 404: the branch has no such version (yet)
	CodeItemNotFound       = "item_not_found"       // 404: no such item at that version
	CodeBlobNotFound       = "blob_not_found"       // 404: the project holds no body or chunk of that hash
	CodeMutationNotFound   = "mutation_not_found"   // 404: a decided mutation without a record (store damaged)
	CodeTooLarge           = "too_large"            // 413: the body is over the limit
	CodeUnsupportedMedia   = "unsupported_media"    // 415: not application/json
	CodePartitionNotServed = "partition_not_served" // 421: this instance does not hold the project's partition
	CodeInternal           = "internal"             // 500: the store failed; the message says how
)

// Error is the JSON error answer of the read API.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Hint    string `json:"hint,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="canon"`)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, e.Status, map[string]*Error{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// authError maps a token error to 401 or 403.
func authError(err error) *Error {
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "no token",
			Hint: "send 'Authorization: Bearer TOKEN' with a token that has the read scope (canon token issue makes one)"}
	case errors.Is(err, auth.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: err.Error(),
			Hint: "use a token issued for this org and project with the read scope (write and admin include it)"}
	default:
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: err.Error(),
			Hint: "get a valid, unexpired token"}
	}
}

func invalid(field, msg, hint string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field, Message: msg, Hint: hint}
}

func internal(err error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error(),
		Hint: "retry; if it persists, the instance's store needs an operator's look (its logs say more)"}
}
