package readapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/wire"
)

// The push endpoints (Canon's and Replicache's) answer as
// docs/openapi.yaml says: every answer of this test is checked against
// the document, as the reads' are.
func TestPushesMatchOpenAPI(t *testing.T) {
	pl := startPipeline(t, 3)
	ann := pl.token("user:ann", []string{"doc"}, auth.ScopeWrite)
	bob := pl.token("user:bob", []string{"doc"}, auth.ScopeWrite)
	reader := pl.token("user:ann", []string{"doc"}, auth.ScopeRead)
	put := func(client string, id int) string {
		return fmt.Sprintf(`{"client":%q,"id":%d,"name":"item.put","args":{"collection":"notes","id":"n%d","data":{"n":%d}},"ts":1}`, client, id, id, id)
	}
	push := func(query, token, body string, header ...string) *response {
		t.Helper()
		return pl.api.do(http.MethodPost, "/v1/projects/acme/doc/push"+query, token, []byte(body), header...)
	}

	// Written, then applied, then a duplicate and a gap.
	if r := push("", ann, `{"clientGroup":"g-ann","mutations":[`+put("c1", 1)+`]}`); r.status != http.StatusOK {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	var resp wire.PushResponse
	r := push("?wait=applied&timeout=20s", ann, `{"branch":"main","clientGroup":"g-ann","mutations":[`+put("c1", 2)+","+put("c2", 1)+`]}`)
	r.json(t, &resp)
	if r.status != http.StatusOK || len(resp.Outcomes) != 2 || resp.Outcomes[0].Status != wire.OutcomeApplied || resp.Outcomes[1].Status != wire.OutcomeApplied {
		t.Fatalf("push with wait=applied: %d %s", r.status, r.body)
	}
	r = push("?wait=applied&timeout=20s", ann, `{"clientGroup":"g-ann","mutations":[`+put("c1", 1)+`]}`)
	r.json(t, &resp)
	if r.status != http.StatusOK || resp.Outcomes[0].Status != wire.OutcomeDuplicate {
		t.Fatalf("a duplicate: %d %s", r.status, r.body)
	}
	r = push("?wait=applied&timeout=20s", ann, `{"clientGroup":"g-ann","mutations":[`+put("c1", 9)+`]}`)
	r.json(t, &resp)
	if r.status != http.StatusOK || resp.Outcomes[0].Status != wire.OutcomeRejected || resp.Outcomes[0].ExpectedID != 3 {
		t.Fatalf("a gap: %d %s", r.status, r.body)
	}

	// Refusals, each with its status and code.
	for _, c := range []struct {
		what, query, token, body string
		header                   []string
		status                   int
		code                     string
	}{
		{"no token", "", "", `{"clientGroup":"g","mutations":[` + put("c9", 1) + `]}`, nil, http.StatusUnauthorized, wire.CodeUnauthenticated},
		{"a read token", "", reader, `{"clientGroup":"g","mutations":[` + put("c9", 1) + `]}`, nil, http.StatusForbidden, wire.CodeForbidden},
		{"not JSON", "", ann, `{"clientGroup":`, nil, http.StatusBadRequest, wire.CodeMalformed},
		{"no mutations", "", ann, `{"clientGroup":"g","mutations":[]}`, nil, http.StatusBadRequest, wire.CodeEmptyBatch},
		{"an unknown wait", "?wait=soon", ann, `{"clientGroup":"g","mutations":[` + put("c9", 1) + `]}`, nil, http.StatusBadRequest, wire.CodeInvalid},
		{"text", "", ann, `{}`, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMedia},
		{"another's client group", "", bob, `{"clientGroup":"g-ann","mutations":[` + put("c9", 1) + `]}`, nil, http.StatusConflict, wire.CodeGroupOwned},
		{"1001 mutations", "", ann, `{"clientGroup":"g","mutations":[` + strings.Repeat(put("c9", 1)+",", 1000) + put("c9", 1) + `]}`, nil, http.StatusRequestEntityTooLarge, wire.CodeTooLarge},
	} {
		if r := push(c.query, c.token, c.body, c.header...); r.status != c.status || r.errorCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.what, r.status, r.body, c.status, c.code)
		}
	}

	// Replicache's push: {} for what it took, Replicache's error object
	// for a version it does not speak.
	rep := func(version int, mutations string) *response {
		t.Helper()
		return pl.api.do(http.MethodPost, "/replicache/v1/acme/doc/push", ann, []byte(fmt.Sprintf(
			`{"profileID":"p","clientGroupID":"rg","mutations":[%s],"pushVersion":%d,"schemaVersion":"1"}`, mutations, version)))
	}
	if r := rep(1, `{"clientID":"rc","id":1,"name":"item.put","args":{"collection":"notes","id":"r1","data":1},"timestamp":4189.5}`); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "{}" {
		t.Fatalf("replicache push: %d %s", r.status, r.body)
	}
	if r := rep(0, ``); r.status != http.StatusOK || !strings.Contains(string(r.body), "VersionNotSupported") {
		t.Fatalf("replicache push version 0: %d %s", r.status, r.body)
	}
	if r := rep(1, `{"clientID":"rc","id":"two"}`); r.status != http.StatusBadRequest || r.errorCode() != wire.CodeInvalid {
		t.Fatalf("replicache push with a bad id: %d %s", r.status, r.body)
	}
}
