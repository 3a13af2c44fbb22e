package producer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

type fixture struct {
	t       *testing.T
	brokers []string
	names   kafka.TopicNames
	keys    *auth.Keyset
	srv     *httptest.Server
	p       *Producer
}

func newFixture(t *testing.T, brokers []string, names kafka.TopicNames, mutate func(*Config)) *fixture {
	t.Helper()
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kafka: kafka.ClientConfig{Brokers: brokers}, Topics: names, Keys: keys.VerifyOnly()}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	mux := http.NewServeMux()
	p.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{t: t, brokers: brokers, names: names, keys: keys, srv: srv, p: p}
}

// run runs p until the test ends and, when p follows the changelog,
// returns once it does.
func run(t *testing.T, p *Producer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if p.watch == nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); !p.watch.following(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the producer does not follow the changelog 10s after Run started")
		}
	}
}

func embedded(t *testing.T) ([]string, kafka.TopicNames) {
	t.Helper()
	emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(emb.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info, err := kafka.EnsureTopics(context.Background(), cl, kafka.TopicsConfig{Partitions: 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return emb.Brokers(), info.Names
}

func (f *fixture) token(subject, org string, projects, scopes []string, ttl time.Duration) string {
	c := auth.Claims{Org: org, Projects: projects, Scopes: scopes}
	c.Subject = subject
	tok, err := f.keys.Issue(c, ttl, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

func (f *fixture) post(path, token, contentType, body string) (int, map[string]any, http.Header) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		f.t.Fatalf("%s: answer is not JSON: %q", path, raw)
	}
	return resp.StatusCode, out, resp.Header
}

// countRecords counts what is in a topic.
func countRecords(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func mutationJSON(client string, id uint64, name, args string) string {
	return fmt.Sprintf(`{"client":%q,"id":%d,"name":%q,"args":%s}`, client, id, name, args)
}

// Every bad request gets its status, code and field, and nothing reaches
// canon.mutations.
func TestBadRequestsWriteNothing(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBatch = 10
		c.Limits = schemas.Limits{MaxArgsBytes: 8 << 10}
		c.Partitions = 6 // follow the changelog: client group owners
	})
	// Bob's client group "taken" with its client b1, as a version in
	// canon.versions says.
	bindGroup(t, brokers, names, "acme", "roadmap", "taken", "user:bob")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if owner, ok := f.p.watch.owner("acme", "roadmap", "taken"); ok && owner == "user:bob" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the producer did not see the binding of client group taken")
		}
		time.Sleep(10 * time.Millisecond)
	}
	good := f.token("user:alice", "acme", []string{"roadmap"}, []string{auth.ScopeWrite}, time.Hour)
	readOnly := f.token("user:alice", "acme", []string{"roadmap"}, []string{auth.ScopeRead}, time.Hour)
	ec := auth.Claims{Org: "acme", Projects: []string{"roadmap"}, Scopes: []string{auth.ScopeWrite}}
	ec.Subject = "user:alice"
	expired, err := f.keys.Issue(ec, time.Hour, time.Now().Add(-2*time.Hour)) // issued two hours ago
	if err != nil {
		t.Fatal(err)
	}
	forger := auth.NewKeyset()
	_ = forger.Generate("k1")
	fc := auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeAdmin}}
	fc.Subject = "user:mallory"
	forged, _ := forger.Issue(fc, time.Hour, time.Now())
	otherOrg := f.token("user:alice", "globex", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)

	one := `{"clientGroup":"g1","mutations":[` + mutationJSON("c1", 1, "item.put", `{"collection":"t","id":"a","data":1}`) + `]}`
	many := make([]string, 11)
	for i := range many {
		many[i] = mutationJSON("c1", uint64(i+1), "item.put", `{}`)
	}
	const path = "/v1/projects/acme/roadmap/push"
	tests := []struct {
		name, path, token, ctype, body string
		status                         int
		code, field, message           string
	}{
		{"malformed JSON", path, good, "application/json", `{"clientGroup":`, 400, wire.CodeMalformed, "", "not valid JSON"},
		{"trailing data", path, good, "application/json", one + `{}`, 400, wire.CodeMalformed, "", "after the JSON object"},
		{"wrong type", path, good, "application/json", `{"clientGroup":7,"mutations":[]}`, 400, wire.CodeInvalid, "clientGroup", "must be a string"},
		{"id not an integer", path, good, "application/json", `{"clientGroup":"g","mutations":[{"client":"c","id":1.5,"name":"x","args":{}}]}`, 400, wire.CodeInvalid, "mutations.id", "non-negative integer"},
		{"id 0", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 0, "x", `{}`) + `]}`, 400, wire.CodeInvalid, "mutations[0].id", ">= 1"},
		{"ids not consecutive", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", `{}`) + `,` + mutationJSON("c", 3, "x", `{}`) + `]}`, 400, wire.CodeInvalid, "mutations[1].id", "increase by 1"},
		{"unknown field", path, good, "application/json", `{"clientGroup":"g","mutatoins":[]}`, 400, wire.CodeInvalid, "mutatoins", "unknown field"},
		{"empty batch", path, good, "application/json", `{"clientGroup":"g","mutations":[]}`, 400, wire.CodeEmptyBatch, "mutations", "no mutations"},
		{"too many mutations", path, good, "application/json", `{"clientGroup":"g","mutations":[` + strings.Join(many, ",") + `]}`, 413, wire.CodeTooLarge, "mutations", "over the limit of 10"},
		{"oversized body", path, good, "application/json", `{"clientGroup":"g","x":"` + strings.Repeat("x", 70<<10) + `"}`, 413, wire.CodeTooLarge, "", "over the limit of 65536 bytes"},
		{"args over the limit", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", `"`+strings.Repeat("a", 9<<10)+`"`) + `]}`, 413, wire.CodeTooLarge, "mutations[0].args", "MaxArgsBytes"},
		{"bad branch", path, good, "application/json", `{"branch":"no/slashes","clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", `{}`) + `]}`, 400, wire.CodeInvalid, "branch", "not a valid branch"},
		{"bad mutator name", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "9lives", `{}`) + `]}`, 400, wire.CodeInvalid, "mutations[0].name", "valid mutator name"},
		{"no client group", path, good, "application/json", `{"mutations":[` + mutationJSON("c", 1, "x", `{}`) + `]}`, 400, wire.CodeInvalid, "clientGroup", "empty"},
		{"not JSON content", path, good, "text/plain", one, 415, wire.CodeUnsupportedMedia, "", "not application/json"},
		{"no token", path, "", "application/json", one, 401, wire.CodeUnauthenticated, "", "no token"},
		{"expired token", path, expired, "application/json", one, 401, wire.CodeUnauthenticated, "", "expired"},
		{"forged signature", path, forged, "application/json", one, 401, wire.CodeUnauthenticated, "", "invalid token"},
		{"wrong org", "/v1/projects/acme/roadmap/push", otherOrg, "application/json", one, 403, wire.CodeForbidden, "", `for org "globex"`},
		{"project outside the token", "/v1/projects/acme/budget/push", good, "application/json", one, 403, wire.CodeForbidden, "", `does not reach project "budget"`},
		{"read-only token", path, readOnly, "application/json", one, 403, wire.CodeForbidden, "", "needs write"},
		{"bad project name", "/v1/projects/acme/Road%20Map/push", good, "application/json", one, 400, wire.CodeInvalid, "project", "not a valid name"},
		{"spoofed client group", path, good, "application/json", strings.Replace(one, `"g1"`, `"taken"`, 1), 409, wire.CodeGroupOwned, "clientGroup", "belongs to another principal"},
		{"client of another group", path, good, "application/json", `{"clientGroup":"g1","mutations":[` + mutationJSON("b1", 2, "item.put", `{}`) + `]}`, 409, wire.CodeClientOwned, "mutations[0].client", "belongs to client group taken, not g1"},
		{"client of another group, second client", path, good, "application/json", `{"clientGroup":"g1","mutations":[` + mutationJSON("c1", 1, "item.put", `{}`) + `,` + mutationJSON("b1", 2, "item.put", `{}`) + `]}`, 409, wire.CodeClientOwned, "mutations[1].client", "belongs to client group taken"},
		{"client of another group, Replicache", "/replicache/v1/acme/roadmap/push", good, "application/json", `{"pushVersion":1,"clientGroupID":"g1","mutations":[{"clientID":"b1","id":2,"name":"item.put","args":{}}]}`, 409, wire.CodeClientOwned, "mutations[0].client", "belongs to client group taken"},
		{"args not UTF-8", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", "{\"a\":\"\xff\"}") + `]}`, 400, wire.CodeInvalid, "mutations[0].args", "not valid UTF-8"},
		{"args not UTF-8, second mutation", path, good, "application/json", `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", `{}`) + `,` + mutationJSON("c", 2, "x", "[\"\xc3\"]") + `]}`, 400, wire.CodeInvalid, "mutations[1].args", "not valid UTF-8"},
		{"client group not UTF-8", path, good, "application/json", "{\"clientGroup\":\"g\xff\",\"mutations\":[" + mutationJSON("c", 1, "x", `{}`) + `]}`, 400, wire.CodeInvalid, "clientGroup", "not valid UTF-8"},
		{"client not UTF-8", path, good, "application/json", `{"clientGroup":"g","mutations":[` + "{\"client\":\"c\xfe\",\"id\":1,\"name\":\"x\",\"args\":{}}" + `]}`, 400, wire.CodeInvalid, "mutations[0].client", "not valid UTF-8"},
		{"unknown field not UTF-8", path, good, "application/json", "{\"clientGroup\":\"g\",\"x\xff\":1}", 400, wire.CodeMalformed, "", "not valid UTF-8 (at byte 21)"},
		{"Replicache args not UTF-8", "/replicache/v1/acme/roadmap/push", good, "application/json", "{\"pushVersion\":1,\"clientGroupID\":\"g\",\"mutations\":[{\"clientID\":\"c\",\"id\":1,\"name\":\"x\",\"args\":\"\xff\"}]}", 400, wire.CodeInvalid, "mutations[0].args", "not valid UTF-8"},
		{"Replicache client group not UTF-8", "/replicache/v1/acme/roadmap/push", good, "application/json", "{\"pushVersion\":1,\"clientGroupID\":\"g\xff\",\"mutations\":[{\"clientID\":\"c\",\"id\":1,\"name\":\"x\",\"args\":{}}]}", 400, wire.CodeInvalid, "clientGroupID", "not valid UTF-8"},
		{"Replicache client not UTF-8", "/replicache/v1/acme/roadmap/push", good, "application/json", "{\"pushVersion\":1,\"clientGroupID\":\"g\",\"mutations\":[{\"clientID\":\"c\xff\",\"id\":1,\"name\":\"x\",\"args\":{}}]}", 400, wire.CodeInvalid, "mutations[0].clientID", "not valid UTF-8"},
		{"unknown wait", path + "?wait=soon", good, "application/json", one, 400, wire.CodeInvalid, "wait", `wait="soon" is not known`},
		{"wait too long", path + "?wait=applied&timeout=1h", good, "application/json", one, 400, wire.CodeInvalid, "timeout", "not a duration between"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out, hdr := f.post(tt.path, tt.token, tt.ctype, tt.body)
			e, _ := out["error"].(map[string]any)
			if status != tt.status || e == nil || e["code"] != tt.code {
				t.Fatalf("got %d %v, want %d %s", status, out, tt.status, tt.code)
			}
			if tt.field != "" && e["field"] != tt.field {
				t.Errorf("field %v, want %s", e["field"], tt.field)
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, tt.message) {
				t.Errorf("message %q does not say %q", msg, tt.message)
			}
			if status == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// The websocket pushes through Push: refused the same way.
	claims, err := f.keys.Verify(good, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, perr := f.p.Push(context.Background(), claims, "acme", "roadmap", wire.PushRequest{ClientGroup: "g1",
		Mutations: []wire.PushMutation{{Client: "b1", ID: 2, Name: "item.put", Args: json.RawMessage(`{}`)}}})
	if perr == nil || perr.Status != http.StatusConflict || perr.Code != wire.CodeClientOwned || perr.Field != "mutations[0].client" {
		t.Errorf("Push of a client of another group: %v, want 409 %s", perr, wire.CodeClientOwned)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 0 {
		t.Fatalf("%d records reached %s", n, names.Mutations)
	}
	// And a good push does reach it: the test could see records.
	if status, out, _ := f.post(path, good, "application/json", one); status != 200 {
		t.Fatalf("good push: %d %v", status, out)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 1 {
		t.Fatalf("%d records after one good push", n)
	}
}

func TestRateLimitPerPrincipal(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, func(c *Config) { c.Rate, c.Burst = 1, 3 })
	alice := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	bob := f.token("user:bob", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	push := func(tok, client string, id int) (int, http.Header) {
		body := `{"clientGroup":"g-` + client + `","mutations":[` + mutationJSON(client, uint64(id), "x", `{}`) + `]}`
		status, _, hdr := f.post("/v1/projects/acme/roadmap/push", tok, "application/json", body)
		return status, hdr
	}
	for i := 1; i <= 3; i++ {
		if s, _ := push(alice, "a", i); s != 200 {
			t.Fatalf("push %d within the burst: %d", i, s)
		}
	}
	s, hdr := push(alice, "a", 4)
	if s != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d, Retry-After %q", s, hdr.Get("Retry-After"))
	}
	if s, _ := push(bob, "b", 1); s != 200 {
		t.Fatalf("another principal is limited too: %d", s)
	}
	// The same subject in another org is another principal: its own bucket.
	aliceGlobex := f.token("user:alice", "globex", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	body := `{"clientGroup":"g-a","mutations":[` + mutationJSON("a", 1, "x", `{}`) + `]}`
	if s, out, _ := f.post("/v1/projects/globex/roadmap/push", aliceGlobex, "application/json", body); s != 200 {
		t.Fatalf("user:alice of globex shares the bucket of user:alice of acme: %d %v", s, out)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 5 {
		t.Fatalf("%d records, want 5 (the refused push wrote nothing)", n)
	}
}

func TestPushStampsAndPartitions(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	body := `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "item.put", `{"collection":"t","id":"a","data":{"x":1}}`) + `,` +
		mutationJSON("c", 2, "item.delete", `{"collection":"t","id":"a"}`) + `]}`
	status, out, _ := f.post("/v1/projects/acme/roadmap/push", tok, "application/json", body)
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	ws := out["mutations"].([]any)
	want := schemas.Partition([]byte("acme/roadmap"), 6)
	for i, w := range ws {
		m := w.(map[string]any)
		if int32(m["partition"].(float64)) != want {
			t.Fatalf("mutation %d on partition %v, Java's partitioner picks %d", i, m["partition"], want)
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Mutations), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollRecords(ctx, 2)
	recs := fs.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		m, err := schemas.DecodeMutation(string(r.Headers[0].Value), r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != uint64(i+1) || m.Principal != "user:alice" || m.ReceivedAt == 0 || m.Branch != "main" || !bytes.Equal(r.Key, []byte("acme/roadmap")) {
			t.Fatalf("record %d: %+v key %q", i, m, r.Key)
		}
	}
}

func TestReplicachePush(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	body := `{"pushVersion":1,"clientGroupID":"cg-1","profileID":"p","schemaVersion":"","mutations":[` +
		`{"clientID":"rc-1","id":1,"name":"item.put","args":{"collection":"t","id":"a","data":1},"timestamp":1732200000000.5}]}`
	if status, out, _ := f.post("/replicache/v1/acme/roadmap/push?branch=main", tok, "application/json", body); status != 200 || len(out) != 0 {
		t.Fatalf("%d %v", status, out)
	}
	status, out, _ := f.post("/replicache/v1/acme/roadmap/push", tok, "application/json", `{"pushVersion":0,"clientGroupID":"cg","mutations":[]}`)
	if status != 200 || out["error"] != "VersionNotSupported" {
		t.Fatalf("old push version: %d %v", status, out)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 1 {
		t.Fatalf("%d records", n)
	}
}

// bindGroup writes a version to canon.versions whose mutation binds a
// client group to a principal, as the sequencer would.
func bindGroup(t *testing.T, brokers []string, names kafka.TopicNames, org, project, group, principal string) {
	t.Helper()
	v, err := schemas.EncodeVersion(&schemas.Version{Org: org, Project: project, Branch: "main", Version: 1,
		Scalars: map[string]json.RawMessage{}, Items: []schemas.ItemChange{}, LastIDs: map[string]uint64{"b1": 1},
		Mutations: []schemas.Outcome{{ClientGroup: group, Client: "b1", ID: 1, Name: "project.set", Args: json.RawMessage(`{}`),
			Status: schemas.StatusApplied, Principal: principal}},
		StateHash: strings.Repeat("0", 64)}, schemas.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	key := schemas.ProjectKey(org, project)
	rec := &kgo.Record{Topic: names.Versions, Key: key, Value: v,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Bodies are read into reused buffers: the records of one push keep their
// args after the next push has reused its body's buffer.
func TestPushesKeepTheirArgs(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	const n = 20
	for i := 1; i <= n; i++ {
		body := `{"clientGroup":"g","mutations":[` + mutationJSON("c", uint64(i), "item.put", fmt.Sprintf(`{"collection":"t","id":"a","data":%d}`, 1000+i)) + `]}`
		if status, out, _ := f.post("/v1/projects/acme/roadmap/push", tok, "application/json", body); status != 200 {
			t.Fatalf("push %d: %d %v", i, status, out)
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Mutations), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n && ctx.Err() == nil {
		recs = append(recs, cl.PollRecords(ctx, n-len(recs)).Records()...)
	}
	if len(recs) != n {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range recs {
		m, err := schemas.DecodeMutation(schemas.SchemaMutationV1, r.Value, schemas.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"collection":"t","id":"a","data":%d}`, 1000+m.ID); string(m.Args) != want {
			t.Fatalf("mutation %d has args %s, want %s", m.ID, m.Args, want)
		}
	}
}

// Every push route reads the Authorization header with the one parser:
// the scheme in any case and a bare token (what Replicache sends) are
// taken, another scheme is a 401 that says what to send.
func TestAuthorizationHeader(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	id := 0
	push := func(header string, replicache bool) (int, string) {
		t.Helper()
		id++
		path, body := "/v1/projects/acme/roadmap/push", `{"clientGroup":"g","mutations":[`+mutationJSON("c", uint64(id), "x", `{}`)+`]}`
		if replicache {
			path = "/replicache/v1/acme/roadmap/push"
			body = fmt.Sprintf(`{"pushVersion":1,"clientGroupID":"g","mutations":[{"clientID":"c","id":%d,"name":"x","args":{}}]}`, id)
		}
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", header)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, c := range []struct {
		header string
		status int
	}{
		{"Bearer " + tok, 200},
		{"bearer " + tok, 200},
		{"BEARER  " + tok, 200},
		{tok, 200},
		{"Basic " + tok, 401},
	} {
		for _, replicache := range []bool{false, true} {
			status, body := push(c.header, replicache)
			if status != c.status {
				t.Errorf("Authorization %.12q… (replicache %v): %d %s, want %d", c.header, replicache, status, body, c.status)
			}
			if status == 401 && !strings.Contains(body, "Bearer TOKEN") {
				t.Errorf("Authorization %.12q…: %s does not say what to send", c.header, body)
			}
			if status != 200 {
				id-- // not written: the next push reuses the id
			}
		}
	}
}

// When Kafka does not take the mutations, the 503 names a request id and
// not Kafka's error, which names the brokers; the log has the error under
// that id.
func TestUnavailableHidesKafkaErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String() // a broker that refuses connections
	_ = ln.Close()
	var logged testenv.LogBuffer
	f := newFixture(t, []string{gone}, kafka.DefaultTopicNames(), func(c *Config) {
		c.ProduceTimeout = time.Second
		c.Log = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	status, out, hdr := f.post("/v1/projects/acme/roadmap/push", tok, "application/json",
		`{"clientGroup":"g","mutations":[`+mutationJSON("c", 1, "x", `{}`)+`]}`)
	e, _ := out["error"].(map[string]any)
	id, _ := e["requestId"].(string)
	if status != http.StatusServiceUnavailable || e["code"] != wire.CodeUnavailable || id == "" || hdr.Get("X-Request-Id") != id {
		t.Fatalf("%d %v, X-Request-Id %q: want 503 %s with a request id", status, out, hdr.Get("X-Request-Id"), wire.CodeUnavailable)
	}
	var line struct {
		Err       string
		RequestID string `json:"request_id"`
	}
	for l := range strings.Lines(logged.String()) {
		if strings.Contains(l, id) {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line.RequestID != id || line.Err == "" {
		t.Fatalf("no log line with the request id %s and the error: %s", id, logged.String())
	}
	if msg, _ := e["message"].(string); strings.Contains(msg, line.Err) || strings.Contains(msg, gone) {
		t.Errorf("the answer %q shows Kafka's error %q", msg, line.Err)
	}
}

// A push with ?wait=applied answers after its wait even on a server whose
// write timeout is shorter: the handler extends its own deadline. Here no
// sequencer runs, so the answer is a timeout outcome (202) after the
// wait.
func TestWaitOutlivesWriteTimeout(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, func(c *Config) { c.Partitions = 6 })
	srv := httptest.NewUnstartedServer(f.srv.Config.Handler)
	srv.Config.WriteTimeout = 50 * time.Millisecond
	srv.Start()
	defer srv.Close()
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/projects/acme/roadmap/push?wait=applied&timeout=500ms",
		strings.NewReader(`{"clientGroup":"g","mutations":[`+mutationJSON("c", 1, "x", `{}`)+`]}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the answer after the wait was lost: %v", err)
	}
	defer resp.Body.Close()
	var out wire.PushResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusAccepted ||
		len(out.Outcomes) != 1 || out.Outcomes[0].Status != wire.OutcomeTimeout {
		t.Fatalf("%d %+v (%v), want 202 with a timeout outcome", resp.StatusCode, out, err)
	}
}

// A body that does not arrive within the server's read timeout is
// answered 408, without the connection's addresses that the read error
// names.
func TestSilentBodyTimesOut(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	srv := httptest.NewUnstartedServer(f.srv.Config.Handler)
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/projects/acme/roadmap/push HTTP/1.1\r\nHost: canon\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 4194304\r\n\r\n{\"clientGroup\":", tok)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), wire.CodeRequestTimeout) || strings.Contains(string(raw), "127.0.0.1") {
		t.Fatalf("%d %s, want 408 %s without addresses", resp.StatusCode, raw, wire.CodeRequestTimeout)
	}
}

// A body cut short (the client announced more bytes than it sent before
// it closed its side) is refused, even when what came is a whole push.
func TestTruncatedBodyRefused(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	body := `{"clientGroup":"g","mutations":[` + mutationJSON("c", 1, "x", `{}`) + `]}`
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/projects/acme/roadmap/push HTTP/1.1\r\nHost: canon\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tok, len(body)+10, body)
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s, want 400", resp.StatusCode, raw)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 0 {
		t.Fatalf("%d records written for a body cut short", n)
	}
}

// Served before Run follows the changelog, a push with ?wait=applied is
// answered 503 with a Retry-After and nothing is written, and the
// producer is not ready; a push without a wait is written. Once Run
// follows the changelog, the same push waits for its outcome (none here:
// no sequencer runs, so it times out with 202).
func TestWaitBeforeRunIsUnavailable(t *testing.T) {
	brokers, names := embedded(t)
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Kafka: kafka.ClientConfig{Brokers: brokers}, Topics: names, Keys: keys.VerifyOnly(), Partitions: 6})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, brokers: brokers, names: names, keys: keys, srv: srv, p: p}
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	body := func(id uint64) string {
		return `{"clientGroup":"g","mutations":[` + mutationJSON("c", id, "x", `{}`) + `]}`
	}
	if err := p.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), names.Versions) {
		t.Errorf("Ready before Run: %v, want an error naming %s", err, names.Versions)
	}
	status, out, hdr := f.post("/v1/projects/acme/roadmap/push?wait=applied&timeout=200ms", tok, "application/json", body(1))
	e, _ := out["error"].(map[string]any)
	if status != http.StatusServiceUnavailable || e["code"] != wire.CodeUnavailable || hdr.Get("Retry-After") != "1" {
		t.Fatalf("wait before Run: %d %v, Retry-After %q: want 503 %s with Retry-After 1", status, out, hdr.Get("Retry-After"), wire.CodeUnavailable)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 0 {
		t.Fatalf("%d records written by a refused push", n)
	}
	if status, out, _ := f.post("/v1/projects/acme/roadmap/push", tok, "application/json", body(1)); status != http.StatusOK {
		t.Fatalf("push without wait before Run: %d %v", status, out)
	}

	run(t, p)
	if err := p.Ready(context.Background()); err != nil {
		t.Errorf("Ready once Run follows the changelog: %v", err)
	}
	status, out, _ = f.post("/v1/projects/acme/roadmap/push?wait=applied&timeout=200ms", tok, "application/json", body(2))
	outcomes, _ := out["outcomes"].([]any)
	if status != http.StatusAccepted || len(outcomes) != 1 || outcomes[0].(map[string]any)["status"] != wire.OutcomeTimeout {
		t.Fatalf("wait once Run follows the changelog: %d %v, want 202 with a timeout outcome", status, out)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}
