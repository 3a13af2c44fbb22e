package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(fanoutClientEnv); cfg != "" {
		os.Exit(fanoutClientMain(cfg))
	}
	testenv.Main(m)
}

// env is a pipeline in one process (canontest's stack): producer,
// sequencer, store and live servers, on a broker of the test's choosing.
type env struct {
	*canontest.Stack
	t    testing.TB
	ctx  context.Context
	kcfg kafka.ClientConfig
	st   *store.Store
	prod *producer.Producer
	live *Server
	srv  *httptest.Server
	// lives counts the live servers, which name their Kafka clients.
	lives int
}

// newEnv starts the pipeline on brokers, nil for testenv's broker.
func newEnv(t testing.TB, brokers []string, parts int32, mod func(*Config)) *env {
	t.Helper()
	s := canontest.Start(t, canontest.Options{Brokers: brokers, Partitions: parts,
		Producer: &producer.Config{Rate: 1e6, Burst: 1e6}})
	e := &env{Stack: s, t: t, ctx: s.Ctx, kcfg: s.Kafka, st: s.Store, prod: s.Producer}
	e.live, e.srv = e.startLive(e.st, mod)
	return e
}

// openStore opens another store, closed after everything that uses it.
func (e *env) openStore() *store.Store { return e.OpenStore(0) }

// startLive starts a live server on st and an HTTP server for it.
func (e *env) startLive(st *store.Store, mod func(*Config)) (*Server, *httptest.Server) {
	e.t.Helper()
	e.lives++
	cfg := Config{Store: st, Kafka: e.kcfg.Aux(fmt.Sprintf("live%d", e.lives)), Topics: e.Topics, Keys: e.Keys.VerifyOnly(),
		Pusher: e.prod, Registerer: prometheus.NewRegistry(), PingInterval: time.Second, PongWait: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Mount(mux)
	srv := httptest.NewServer(mux)
	// The HTTP server closes after the live server: Run closes the sockets.
	e.Defer(srv.Close)
	e.Go("live", s.Run)
	canontest.WaitFor(e.t, 30*time.Second, "live server ready", func() (bool, error) { return s.Ready(e.ctx) == nil, nil })
	return s, srv
}

func (e *env) token(org string, projects []string, ttl time.Duration, scopes ...string) string {
	e.t.Helper()
	c := auth.Claims{Org: org, Projects: projects, Scopes: scopes}
	c.Subject = "user:" + strings.Join(projects, ",") + ":" + strings.Join(scopes, ",")
	return e.Token(e.t, c, ttl)
}

// push writes mutations as principal through the producer's Go API.
func (e *env) push(org, project, client string, ids ...uint64) error {
	c := &auth.Claims{Org: org, Projects: []string{project}, Scopes: []string{auth.ScopeWrite}}
	c.Subject = "user:" + client
	var ms []wire.PushMutation
	for _, id := range ids {
		ms = append(ms, wire.PushMutation{Client: client, ID: id, Name: "item.put",
			Args: json.RawMessage(fmt.Sprintf(`{"collection":"c","id":%q,"data":{"n":%d}}`, client, id))})
	}
	_, perr := e.prod.Push(e.ctx, c, org, project, wire.PushRequest{ClientGroup: "g-" + client, Mutations: ms})
	if perr != nil {
		return perr
	}
	return nil
}

// waitHead waits until the store's head of a branch is at least v.
func (e *env) waitHead(org, project, branch string, v uint64) {
	e.t.Helper()
	canontest.WaitHead(e.t, canontest.Context(e.t, 2*time.Minute), e.st, org, project, branch, v)
}

// client is a websocket client of the tests.
type client struct {
	t  testing.TB
	ws *websocket.Conn
}

// dial opens a subscription; query is the raw query string.
func dial(t testing.TB, srv *httptest.Server, org, project, query string, header http.Header, dialer *websocket.Dialer) (*client, error) {
	if dialer == nil {
		dialer = websocket.DefaultDialer
	}
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/projects/" + org + "/" + project + "/ws"
	if query != "" {
		url += "?" + query
	}
	ws, resp, err := dialer.Dial(url, header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return &client{t: t, ws: ws}, nil
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// msg is a received message: its type, raw bytes and decoded fields.
type msg struct {
	Type    string      `json:"type"`
	Version uint64      `json:"version"`
	Head    uint64      `json:"head"`
	Reason  string      `json:"reason"`
	Error   *wire.Error `json:"error"`
	raw     []byte
}

// next reads one message; err is the close error at the end.
func (c *client) next(timeout time.Duration) (msg, error) {
	_ = c.ws.SetReadDeadline(time.Now().Add(timeout))
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return msg{}, err
	}
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("message %s: %v", b, err)
	}
	m.raw = b
	return m, nil
}

// expect reads one message and fails unless it has type typ.
func (c *client) expect(typ string) msg {
	c.t.Helper()
	m, err := c.next(time.Minute)
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if m.Type != typ {
		c.t.Fatalf("got %s, want a %s message", m.raw, typ)
	}
	return m
}

// closeCode reads until the socket closes and returns the close code.
func (c *client) closeCode() (int, []msg) {
	c.t.Helper()
	var got []msg
	for {
		m, err := c.next(time.Minute)
		if err == nil {
			got = append(got, m)
			continue
		}
		if ce := (*websocket.CloseError)(nil); errors.As(err, &ce) {
			return ce.Code, got
		}
		c.t.Fatalf("read until close: %v (after %d messages)", err, len(got))
	}
}

func (c *client) close() { _ = c.ws.Close() }

// checkVersions fails unless vs are the versions after from up to the
// store's version to, each once, in order, and byte for byte the encoding
// of the store's versions.
func checkVersions(t testing.TB, st *store.Store, org, project, branch string, from uint64, vs []msg) {
	t.Helper()
	want, err := st.Versions(org, project, branch, from+1, len(vs)+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < len(vs) {
		t.Fatalf("%s/%s: got %d versions after %d, the store has %d", org, project, len(vs), from, len(want))
	}
	for i, m := range vs {
		b, err := encodeVersion(&want[i])
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != from+uint64(i)+1 || string(m.raw) != string(b) {
			t.Fatalf("%s/%s message %d after %d: got version %d %s\nwant %s", org, project, i, from, m.Version, m.raw, b)
		}
	}
}

// smallReadBuffer dials with a small kernel receive buffer, so that a
// client that stops reading soon backs up the server.
func smallReadBuffer() *websocket.Dialer {
	return &websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{}
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			err = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		}
		return c, err
	}, ReadBufferSize: 1 << 10}
}
