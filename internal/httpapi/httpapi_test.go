package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/auth"

	"github.com/canon-sync/canon/wire"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		e                        *wire.Error
		retryAfter, authenticate string
	}{
		{&wire.Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "slow down", RetryAfter: 3}, "3", ""},
		{&wire.Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthenticated, Message: "no token", Hint: "send one"}, "", `Bearer realm="canon"`},
		{&wire.Error{Status: http.StatusBadRequest, Code: "invalid_field", Message: "bad", Field: "from"}, "", ""},
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

// A failure of the server's own making is logged with a request id; the
// answer names the id and says nothing of the error, which names files
// and brokers.
func TestInternal(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	cause := errors.New("open /srv/canon/store/000042.sst: broker 10.0.0.7:9092 refused")
	e := Internal(log, http.StatusServiceUnavailable, "kafka_unavailable", "the mutations could not be written to Kafka", "retry", cause, "org", "acme")
	rec := httptest.NewRecorder()
	WriteError(rec, e)
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || e.RequestID == "" || rec.Header().Get("X-Request-Id") != e.RequestID {
		t.Fatalf("%d %s, X-Request-Id %q", rec.Code, body, rec.Header().Get("X-Request-Id"))
	}
	if strings.Contains(body, "10.0.0.7") || strings.Contains(body, "/srv/canon") || !strings.Contains(body, `"requestId":"`+e.RequestID+`"`) ||
		!strings.Contains(body, "request id "+e.RequestID) {
		t.Errorf("the answer %s shows the cause or lacks the request id", body)
	}
	var line struct {
		Msg, Err, Org string
		RequestID     string `json:"request_id"`
	}
	if err := json.Unmarshal(logged.Bytes(), &line); err != nil || line.RequestID != e.RequestID || line.Err != cause.Error() || line.Org != "acme" {
		t.Errorf("log %s (%v): want the request id, the cause and the attrs", logged.Bytes(), err)
	}
	if a, b := NewRequestID(), NewRequestID(); a == b || len(a) != 16 {
		t.Errorf("request ids %q and %q: want two different ones of 16 hex digits", a, b)
	}
}

func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/projects/{org}/{project}/push", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, "pushed to ", r.PathValue("project"))
	})
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) { _, _ = fmt.Fprint(w, "ui") })
	h := Routes(mux)
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
		body         string
	}{
		{"POST", "/v1/projects/o/p/push", 200, "", "", "pushed to p"},
		{"GET", "/ui/anything", 200, "", "", "ui"},
		{"GET", "/v1/nope", 404, wire.CodeNoRoute, "", ""},
		{"GET", "/v1/projects/o/p/push", 405, wire.CodeMethod, "POST", ""},
		{"GET", "/ui", 0, "", "", ""}, // the mux's redirect to /ui/ stays
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if tc.status == 0 {
			plain := httptest.NewRecorder()
			mux.ServeHTTP(plain, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != plain.Code || rec.Header().Get("Location") != "/ui/" || rec.Body.String() != plain.Body.String() {
				t.Errorf("%s %s: %d %v %q, the mux answers %d %v %q", tc.method, tc.path,
					rec.Code, rec.Header(), rec.Body, plain.Code, plain.Header(), plain.Body)
			}
			continue
		}
		if rec.Code != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, rec.Code, tc.status)
			continue
		}
		if tc.code == "" {
			if tc.body != "" && rec.Body.String() != tc.body {
				t.Errorf("%s %s: body %q, want %q", tc.method, tc.path, rec.Body, tc.body)
			}
			continue
		}
		var body wire.ErrorAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == nil {
			t.Fatalf("%s %s: body %q: %v", tc.method, tc.path, rec.Body, err)
		}
		if body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.path) || body.Error.Hint == "" {
			t.Errorf("%s %s: error %+v", tc.method, tc.path, body.Error)
		}
		if rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: headers %v", tc.method, tc.path, rec.Header())
		}
	}
}
