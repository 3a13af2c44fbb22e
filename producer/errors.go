package producer

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

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
func authError(err error) *wire.Error { return httpapi.AuthError(err, pushAuthHints) }

// fieldError maps a schemas validation error of mutation i to 400 or 413.
func fieldError(i int, err error) *wire.Error {
	field := ""
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		field = fmt.Sprintf("mutations[%d].%s", i, fe.Field)
	}
	if errors.Is(err, schemas.ErrTooLarge) {
		return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge, Field: field, Message: err.Error(),
			Hint: "send smaller args; large items are split across several items"}
	}
	msg := err.Error()
	if fe != nil {
		msg = fe.Reason
	}
	return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: field, Message: msg}
}
