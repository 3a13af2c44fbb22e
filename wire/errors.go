package wire

import (
	"fmt"
)

// Error is the error answer of every API: over HTTP the body
// {"error": {...}} (ErrorAnswer), on the websocket the error of an
// ErrorMessage. Code says what went wrong (one of the Code constants),
// Message the details, Field the parameter or body field at fault, Hint
// what to do.
type Error struct {
	// Status is the HTTP status of the answer; not sent in the body.
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Hint    string `json:"hint,omitempty"`
	// RetryAfter, in seconds, is sent as the Retry-After header (429 and
	// 503); not in the body.
	RetryAfter int `json:"-"`
	// RequestID names a failure of the server's own making in its log; it
	// is also sent as X-Request-Id.
	RequestID string `json:"requestId,omitempty"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("canon: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// ErrorAnswer is the body of an HTTP error answer.
type ErrorAnswer struct {
	Error *Error `json:"error"`
}

// Error codes of the HTTP APIs (push, reads, Replicache's push and pull),
// with the status they come with. docs/openapi.yaml lists the same codes.
const (
	CodeMalformed          = "malformed_json"        // 400: the body is not the JSON the endpoint takes
	CodeInvalid            = "invalid_field"         // 400: a field or parameter is missing, malformed or out of range
	CodeEmptyBatch         = "empty_batch"           // 400: no mutations
	CodeInvalidBundle      = "invalid_bundle"        // 400: a mutator bundle that does not compile (syntax, exports, names)
	CodeVersion            = "unsupported_version"   // 400: a Replicache pushVersion other than 1
	CodeUnauthenticated    = "unauthenticated"       // 401: no token, or a bad or expired one
	CodeForbidden          = "forbidden"             // 403: the token does not reach the org, project or scope
	CodeOriginNotAllowed   = "origin_not_allowed"    // 403: a browser origin that is not allowed (preflight or websocket upgrade)
	CodeBranchNotFound     = "branch_not_found"      // 404: the project has no such branch
	CodeVersionNotFound    = "version_not_found"     // 404: the branch has no such version (yet)
	CodeItemNotFound       = "item_not_found"        // 404: no such item at that version
	CodeBlobNotFound       = "blob_not_found"        // 404: the project holds no body or chunk of that hash
	CodeMutationNotFound   = "mutation_not_found"    // 404: a decided mutation without a record (store damaged)
	CodeNoBundle           = "no_bundle"             // 404: no mutator bundle is deployed for the project or its org
	CodeNoRoute            = "no_route"              // 404: no endpoint has that path
	CodeMethod             = "method_not_allowed"    // 405: the endpoint takes other methods (Allow lists them)
	CodeRequestTimeout     = "request_timeout"       // 408: the body did not arrive within the server's read timeout
	CodeGroupOwned         = "client_group_owned"    // 409: the client group belongs to another principal
	CodeClientOwned        = "client_in_other_group" // 409: the client belongs to another client group
	CodeTooLarge           = "too_large"             // 413: over a size or count limit
	CodeUnsupportedMedia   = "unsupported_media"     // 415: not application/json
	CodePartitionNotServed = "partition_not_served"  // 421: this instance does not hold the project's partition
	CodeRateLimited        = "rate_limited"          // 429: over the principal's rate; retry after Retry-After
	CodeInternal           = "internal"              // 500: the store failed; the message names a request id of the server's log
	CodeNoWait             = "wait_unavailable"      // 501: this producer does not follow the changelog
	CodeUnavailable        = "kafka_unavailable"     // 503: the records could not be written, or their outcomes cannot be followed; retry
)

// Error codes of the websocket's error messages, beyond the push codes
// (an error answering a push carries the push API's codes). Most come
// before a close frame with the close code named.
const (
	CodeMalformedMessage = "malformed_message" // a message that is not a JSON text object
	CodeUnknownType      = "unknown_type"      // a message type the server does not take
	CodePushDisabled     = "push_unavailable"  // this server takes no pushes on the websocket
	CodeWrongBranch      = "wrong_branch"      // a push to another branch than the socket's
	CodeTokenExpired     = "token_expired"     // CloseUnauthenticated: the token expired
	CodeBadRequest       = "bad_request"       // CloseBadRequest: the subscription is invalid
	CodeNotServed        = "not_served"        // CloseNotServed: the server does not follow the partition
	CodeSlow             = "slow_consumer"     // CloseSlow: the client's queue overflowed
	CodeGoingAway        = "going_away"        // CloseGoingAway: the server is shutting down
	CodeStoreBehind      = "store_behind"      // CloseServerError: the store lags the changelog
	CodeStoreError       = "store_error"       // CloseServerError: the store failed
)
