package readapi

import (
	"net/http"

	"github.com/canon-sync/canon/internal/httpapi"
)

// Error codes of the read API. Every error answer is
// {"error": {"code", "message", "field", "hint"}}, the shape of the push
// API's errors (producer/errors.go): code says what went wrong, message
// the details, field the parameter at fault, hint what to do.
const (
	CodeInvalid            = "invalid_field"             // 400: a path or query parameter is malformed or out of range
	CodeMalformed          = "malformed_json"            // 400: the body is not the JSON the endpoint takes
	CodeUnauthenticated    = httpapi.CodeUnauthenticated // 401: no token, or a bad or expired one
	CodeForbidden          = httpapi.CodeForbidden       // 403: the token does not reach the org, project or scope
	CodeBranchNotFound     = "branch_not_found"          // 404: the project has no such branch
	CodeVersionNotFound    = "version_not_found"         // 404: the branch has no such version (yet)
	CodeItemNotFound       = "item_not_found"            // 404: no such item at that version
	CodeBlobNotFound       = "blob_not_found"            // 404: the project holds no body or chunk of that hash
	CodeMutationNotFound   = "mutation_not_found"        // 404: a decided mutation without a record (store damaged)
	CodeTooLarge           = "too_large"                 // 413: the body is over the limit
	CodeUnsupportedMedia   = "unsupported_media"         // 415: not application/json
	CodePartitionNotServed = "partition_not_served"      // 421: this instance does not hold the project's partition
	CodeInternal           = "internal"                  // 500: the store failed; the message names a request id of the server's log
)

// Error is the JSON error answer of the read API.
type Error = httpapi.Error

var (
	writeError = httpapi.WriteError
	writeJSON  = httpapi.WriteJSON
)

var readAuthHints = httpapi.AuthHints{
	NoToken:   "send 'Authorization: Bearer TOKEN' with a token that has the read scope (canon token issue makes one)",
	Forbidden: "use a token issued for this org and project with the read scope (write and admin include it)",
}

// authError maps a token error to 401 or 403.
func authError(err error) *Error { return httpapi.AuthError(err, readAuthHints) }

func invalid(field, msg, hint string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field, Message: msg, Hint: hint}
}

// internal answers a store failure: the error is logged with a request
// id, which the answer names instead of the error's text.
func (s *Server) internal(r *http.Request, err error) *Error {
	return httpapi.Internal(s.cfg.Log, http.StatusInternalServerError, CodeInternal, "the store could not be read",
		"retry; if it persists, the instance's store needs an operator's look (its log has the details under the request id)",
		err, "method", r.Method, "path", r.URL.Path)
}
