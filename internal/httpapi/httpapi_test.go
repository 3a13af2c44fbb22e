package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/canon-sync/canon/internal/auth"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		e                        *Error
		retryAfter, authenticate string
	}{
		{&Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "slow down", RetryAfter: 3}, "3", ""},
		{&Error{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "no token", Hint: "send one"}, "", `Bearer realm="canon"`},
		{&Error{Status: http.StatusBadRequest, Code: "invalid_field", Message: "bad", Field: "from"}, "", ""},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, tc.e)
		if rec.Code != tc.e.Status {
			t.Errorf("%s: status %d", tc.e.Code, rec.Code)
		}
		h := rec.Header()
		if h.Get("Retry-After") != tc.retryAfter || h.Get("WWW-Authenticate") != tc.authenticate ||
			h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: headers %v", tc.e.Code, h)
		}
		var body struct{ Error map[string]any }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if body.Error["code"] != tc.e.Code || body.Error["message"] != tc.e.Message || len(body.Error) != 2+btoi(tc.e.Field != "")+btoi(tc.e.Hint != "") {
			t.Errorf("%s: body %s", tc.e.Code, rec.Body)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestAuthError(t *testing.T) {
	hints := AuthHints{NoToken: "send a token", Forbidden: "use another token"}
	for _, tc := range []struct {
		err    error
		status int
		hint   string
	}{
		{auth.ErrNoToken, http.StatusUnauthorized, "send a token"},
		{fmt.Errorf("%w: project p", auth.ErrForbidden), http.StatusForbidden, "use another token"},
		{errors.New("token expired"), http.StatusUnauthorized, "get a valid, unexpired token"},
	} {
		e := AuthError(tc.err, hints)
		if e.Status != tc.status || e.Hint != tc.hint {
			t.Errorf("%v: %d %q", tc.err, e.Status, e.Hint)
		}
	}
}
