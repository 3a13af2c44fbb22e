package readapi

import (
	"net/http"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/wire"
)

var (
	writeError = httpapi.WriteError
	writeJSON  = httpapi.WriteJSON
)

var readAuthHints = httpapi.AuthHints{
	NoToken:   "send 'Authorization: Bearer TOKEN' with a token that has the read scope (canon token issue makes one)",
	Forbidden: "use a token issued for this org and project with the read scope (write and admin include it)",
}

// authError maps a token error to 401 or 403.
func authError(err error) *wire.Error { return httpapi.AuthError(err, readAuthHints) }

func invalid(field, msg, hint string) *wire.Error {
	return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: field, Message: msg, Hint: hint}
}

// internal answers a store failure: the error is logged with a request
// id, which the answer names instead of the error's text.
func (s *Server) internal(r *http.Request, err error) *wire.Error {
	return httpapi.Internal(s.cfg.Log, http.StatusInternalServerError, wire.CodeInternal, "the store could not be read",
		"retry; if it persists, the instance's store needs an operator's look (its log has the details under the request id)",
		err, "method", r.Method, "path", r.URL.Path)
}
