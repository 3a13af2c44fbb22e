package live

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// The websocket on the real broker, with the producer, sequencer and store
// in-process. The subtests share one pipeline and use their own projects.
func TestLive(t *testing.T) {
	e := newEnv(t, nil, 3, nil)

	t.Run("every subscriber gets every version once in order", func(t *testing.T) { testConcurrentPushes(t, e) })
	t.Run("slow consumer", func(t *testing.T) { testSlowConsumer(t, e) })
	t.Run("auth", func(t *testing.T) { testAuth(t, e) })
	t.Run("authorization header", func(t *testing.T) { testAuthorizationHeader(t, e) })
	t.Run("request timeouts", func(t *testing.T) { testRequestTimeouts(t, e) })
	t.Run("reset", func(t *testing.T) { testReset(t, e) })
	t.Run("push on the socket", func(t *testing.T) { testPush(t, e) })
	t.Run("oversized message", func(t *testing.T) { testOversized(t, e) })
	t.Run("partition not served", func(t *testing.T) { testNotServed(t, e) })
	t.Run("token expiry", func(t *testing.T) { testExpiry(t, e) })
}

// Many clients push to several projects while subscribers of every kind
// read: from 0 before the pushes, from 0 or from a version in the middle
// of them, live only, and resuming after disconnects. Each gets every
// version after its start exactly once, in order, equal to the store's.
func testConcurrentPushes(t *testing.T, e *env) {
	const (
		projects = 3
		clients  = 4
		perPush  = 2
		pushes   = 15
		total    = clients * perPush * pushes
	)
	tok := e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead)
	type result struct {
		project string
		from    uint64
		vs      []msg
	}
	results := make(chan result, 100)
	errs := make(chan error, 100)
	var subs sync.WaitGroup
	// subscribe reads from `from` (nil: live) until total, disconnecting
	// after `drop` versions (0: never) and resuming from the last one.
	subscribe := func(project string, from *uint64, drop int) {
		subs.Go(func() {
			q := ""
			if from != nil {
				q = fmt.Sprintf("from=%d", *from)
			}
			c, err := dial(t, e.srv, "acme", project, q, bearer(tok), nil)
			if err != nil {
				errs <- err
				return
			}
			hello, err := c.next(time.Minute)
			if err != nil || hello.Type != wire.TypeHello {
				errs <- fmt.Errorf("hello: %s %w", hello.raw, err)
				return
			}
			start := hello.Head
			if from != nil {
				start = *from
			}
			var got []msg
			last := start
			for last < total {
				m, err := c.next(time.Minute)
				if err != nil {
					errs <- fmt.Errorf("%s from %d after %d: %w", project, start, last, err)
					return
				}
				if m.Type != wire.TypeVersion {
					continue
				}
				got = append(got, m)
				last = m.Version
				if drop > 0 && len(got)%drop == 0 && last < total {
					c.close()
					if c, err = dial(t, e.srv, "acme", project, fmt.Sprintf("from=%d", last), bearer(tok), nil); err != nil {
						errs <- err
						return
					}
					if m, err := c.next(time.Minute); err != nil || m.Type != wire.TypeHello {
						errs <- fmt.Errorf("hello on resume: %s %w", m.raw, err)
						return
					}
				}
			}
			c.close()
			results <- result{project, start, got}
		})
	}
	zero := uint64(0)
	for pi := range projects {
		p := fmt.Sprintf("conc%d", pi)
		subscribe(p, &zero, 0)
		subscribe(p, &zero, 0)
		subscribe(p, nil, 0)
		subscribe(p, &zero, 7)
	}
	// Let the early subscribers say hello before the first push, so that
	// the live-only one starts at 0.
	canontest.WaitFor(t, time.Minute, "12 subscribers", func() (bool, error) {
		return testutil.ToFloat64(e.live.m.subscribers) == projects*4, nil
	})

	var pushers sync.WaitGroup
	for pi := range projects {
		for ci := range clients {
			pushers.Go(func() {
				client := fmt.Sprintf("conc%d-c%d", pi, ci)
				for i := range pushes {
					ids := make([]uint64, perPush)
					for j := range ids {
						ids[j] = uint64(i*perPush + j + 1)
					}
					if err := e.push("acme", fmt.Sprintf("conc%d", pi), client, ids...); err != nil {
						errs <- err
						return
					}
					if i == pushes/2 && ci == 0 {
						// Late joiners: from 0, and from wherever the store is.
						p := fmt.Sprintf("conc%d", pi)
						h, _ := e.st.Head("acme", p, "main")
						subscribe(p, &zero, 0)
						subscribe(p, &h.Version, 0)
						subscribe(p, &h.Version, 11)
					}
				}
			})
		}
	}
	pushers.Wait()
	subs.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := 0
	for r := range results {
		n++
		if uint64(len(r.vs)) != total-r.from {
			t.Fatalf("%s from %d: %d versions, want %d", r.project, r.from, len(r.vs), total-r.from)
		}
		checkVersions(t, e.st, "acme", r.project, "main", r.from, r.vs)
	}
	t.Logf("%v versions sent, %v from the store, %v live ones ahead filled from the store",
		testutil.ToFloat64(e.live.m.sentVersion), testutil.ToFloat64(e.live.m.catchUp), testutil.ToFloat64(e.live.m.storeFills))
	if n != projects*7 {
		t.Fatalf("%d subscribers finished, want %d", n, projects*7)
	}
	for pi := range projects {
		vs, err := e.st.Versions("acme", fmt.Sprintf("conc%d", pi), "main", 1, total+1)
		if err != nil || len(vs) != total {
			t.Fatalf("conc%d: %d versions in the store (%v), want %d", pi, len(vs), err, total)
		}
	}
}

// A client that stops reading is closed with 4008 once its queue
// overflows, after the versions written before; it resumes from the last
// one it read and misses none.
func testSlowConsumer(t *testing.T, e *env) {
	slow, srv := e.startLive(e.st, func(c *Config) {
		c.QueueSize = 16
		c.SendBufferBytes = 4 << 10
		c.WriteTimeout = time.Minute
		c.PongWait = 2 * time.Minute
		c.PingInterval = time.Minute
	})
	tok := e.token("acme", []string{"slow"}, time.Hour, auth.ScopeRead)
	c, err := dial(t, srv, "acme", "slow", "from=0", bearer(tok), smallReadBuffer())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.expect(wire.TypeHello)
	// Push until the server gives up on the client, which reads nothing.
	var id uint64
	for testutil.ToFloat64(slow.m.overflows) == 0 {
		if id > 5000 {
			t.Fatalf("no overflow after %d versions", id)
		}
		id++
		if err := e.push("acme", "slow", "s1", id); err != nil {
			t.Fatal(err)
		}
		if id%20 == 0 {
			e.waitHead("acme", "slow", "main", id)
		}
	}
	code, got := c.closeCode()
	if code != wire.CloseSlow {
		t.Fatalf("close code %d, want %d", code, wire.CloseSlow)
	}
	var vs []msg
	for _, m := range got {
		switch m.Type {
		case wire.TypeVersion:
			vs = append(vs, m)
		case wire.TypeError:
			if m.Error.Code != wire.CodeSlow || !strings.Contains(m.Error.Hint, fmt.Sprintf("from=%d", uint64(len(vs)))) {
				t.Fatalf("error message %s after %d versions", m.raw, len(vs))
			}
		default:
			t.Fatalf("unexpected %s", m.raw)
		}
	}
	if len(vs) == 0 || uint64(len(vs)) >= id {
		t.Fatalf("the slow client got %d of %d versions before the close", len(vs), id)
	}
	if got := testutil.ToFloat64(slow.m.closes.WithLabelValues("4008")); got != 1 {
		t.Fatalf("%v slow closes counted", got)
	}
	// Resume from the last version read.
	last := vs[len(vs)-1].Version
	c2, err := dial(t, srv, "acme", "slow", fmt.Sprintf("from=%d", last), bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.close()
	c2.expect(wire.TypeHello)
	for uint64(len(vs)) < id {
		vs = append(vs, c2.expect(wire.TypeVersion))
	}
	checkVersions(t, e.st, "acme", "slow", "main", 0, vs)
	t.Logf("closed as slow after %d of %d versions", last, id)
}

// Subscriptions without a valid token are closed with 4001, those whose
// token does not reach the project with 4003, each after an error message.
func testAuth(t *testing.T, e *env) {
	other := auth.NewKeyset()
	if err := other.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	c := auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeRead}}
	c.Subject = "mallory"
	forged, err := other.Issue(c, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expired, err := e.Keys.Issue(c, time.Second, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		query  string
		header string
		code   int
		err    string
	}{
		{"no token", "", "", wire.CloseUnauthenticated, wire.CodeUnauthenticated},
		{"garbage", "token=abc", "", wire.CloseUnauthenticated, wire.CodeUnauthenticated},
		{"forged", "", forged, wire.CloseUnauthenticated, wire.CodeUnauthenticated},
		{"expired", "token=" + expired, "", wire.CloseUnauthenticated, wire.CodeUnauthenticated},
		{"other project", "", e.token("acme", []string{"elsewhere"}, time.Hour, auth.ScopeRead), wire.CloseForbidden, wire.CodeForbidden},
		{"other org", "token=" + e.token("umbrella", []string{"*"}, time.Hour, auth.ScopeRead), "", wire.CloseForbidden, wire.CodeForbidden},
		{"bad branch", "branch=" + strings.Repeat("b", 300) + "&token=" + e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead), "",
			wire.CloseBadRequest, wire.CodeBadRequest},
		{"bad from", "from=-1", e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead), wire.CloseBadRequest, wire.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := bearer(tc.header)
			if tc.header == "" {
				h = nil
			}
			cl, err := dial(t, e.srv, "acme", "authp", tc.query, h, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.close()
			code, got := cl.closeCode()
			if code != tc.code || len(got) != 1 || got[0].Type != wire.TypeError || got[0].Error.Code != tc.err {
				t.Fatalf("close %d after %d messages (%v), want %d after an error %s", code, len(got), got, tc.code, tc.err)
			}
		})
	}
	// The query token works as well as the header: a browser's way.
	cl, err := dial(t, e.srv, "acme", "authp", "token="+e.token("acme", []string{"authp"}, time.Hour, auth.ScopeRead), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	if m := cl.expect(wire.TypeHello); !strings.Contains(string(m.raw), `"protocol":1`) {
		t.Fatalf("hello %s", m.raw)
	}
	// A token that expires closes an open socket with 4001.
	c.Projects = []string{"authp"}
	short, err := e.Keys.Issue(c, 2*time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := dial(t, e.srv, "acme", "authp", "token="+short, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.close()
	if code, got := cs.closeCode(); code != wire.CloseUnauthenticated || got[len(got)-1].Error == nil || got[len(got)-1].Error.Code != wire.CodeTokenExpired {
		t.Fatalf("expiring token: close %d after %v", code, got)
	}
}

// A subscription from a version the branch does not have gets reset with
// the head, then the versions after the head.
func testReset(t *testing.T, e *env) {
	tok := e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead)
	for id := uint64(1); id <= 3; id++ {
		if err := e.push("acme", "resetp", "r1", id); err != nil {
			t.Fatal(err)
		}
	}
	e.waitHead("acme", "resetp", "main", 3)

	c, err := dial(t, e.srv, "acme", "resetp", "from=10", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if h := c.expect(wire.TypeHello); h.Head != 3 {
		t.Fatalf("hello %s", h.raw)
	}
	if r := c.expect(wire.TypeReset); r.Reason != wire.ReasonFutureVersion || r.Head != 3 {
		t.Fatalf("reset %s", r.raw)
	}
	if err := e.push("acme", "resetp", "r1", 4); err != nil {
		t.Fatal(err)
	}
	if v := c.expect(wire.TypeVersion); v.Version != 4 {
		t.Fatalf("after reset: %s", v.raw)
	}

	u, err := dial(t, e.srv, "acme", "resetp", "branch=nope&from=2", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	u.expect(wire.TypeHello)
	if r := u.expect(wire.TypeReset); r.Reason != wire.ReasonUnknownBranch || r.Head != 0 || !strings.Contains(string(r.raw), `"branch":"nope"`) {
		t.Fatalf("reset %s", r.raw)
	}
	// From 0 on a branch without versions is no reset: nothing is missed.
	z, err := dial(t, e.srv, "acme", "resetp", "branch=new&from=0", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer z.close()
	if h := z.expect(wire.TypeHello); h.Head != 0 {
		t.Fatalf("hello %s", h.raw)
	}
	if err := z.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","requestId":"p"}`)); err != nil {
		t.Fatal(err)
	}
	z.expect(wire.TypePong)
}

// Mutations pushed on the socket get their written positions at once,
// then come back in version messages; a gap comes back as a rejected
// message; a read-only token cannot push.
func testPush(t *testing.T, e *env) {
	tok := e.token("acme", []string{"pushp"}, time.Hour, auth.ScopeWrite)
	c, err := dial(t, e.srv, "acme", "pushp", "from=0", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if h := c.expect(wire.TypeHello); !strings.Contains(string(h.raw), `"push":true`) {
		t.Fatalf("hello %s", h.raw)
	}
	send := func(s string) {
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"push","requestId":"r1","clientGroup":"g1","mutations":[
		{"client":"c1","id":1,"name":"item.put","args":{"collection":"c","id":"a","data":1}},
		{"client":"c1","id":2,"name":"no.such.mutator","args":{}}]}`)
	var pushed struct {
		RequestID string `json:"requestId"`
		Mutations []struct {
			Client    string `json:"client"`
			ID        uint64 `json:"id"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"mutations"`
	}
	var outcomes []wire.MutationMessage
	for len(outcomes) < 2 || pushed.RequestID == "" {
		m, err := c.next(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case wire.TypePushed:
			if err := json.Unmarshal(m.raw, &pushed); err != nil {
				t.Fatal(err)
			}
		case wire.TypeVersion:
			var v wire.VersionMessage
			if err := json.Unmarshal(m.raw, &v); err != nil {
				t.Fatal(err)
			}
			outcomes = append(outcomes, v.Mutations...)
		default:
			t.Fatalf("unexpected %s", m.raw)
		}
	}
	wantPart := schemas.Partition(schemas.ProjectKey("acme", "pushp"), e.Partitions)
	if pushed.RequestID != "r1" || len(pushed.Mutations) != 2 || pushed.Mutations[1].ID != 2 ||
		pushed.Mutations[0].Partition != wantPart || pushed.Mutations[1].Offset != pushed.Mutations[0].Offset+1 {
		t.Fatalf("pushed %+v", pushed)
	}
	if outcomes[0].Client != "c1" || outcomes[0].ID != 1 || outcomes[0].Status != schemas.StatusApplied ||
		outcomes[1].ID != 2 || outcomes[1].Status != schemas.StatusError || outcomes[1].Error == "" {
		t.Fatalf("outcomes %+v", outcomes)
	}

	// A gap: id 5 after 2.
	send(`{"type":"push","requestId":"r2","clientGroup":"g1","mutations":[{"client":"c1","id":5,"name":"item.put","args":{"collection":"c","id":"a","data":2}}]}`)
	rejected := pushedThenRejected(t, c)
	if rejected.Reason != schemas.ReasonGap || rejected.ExpectedID != 3 || rejected.Client != "c1" || rejected.ID != 5 || rejected.Branch != "main" {
		t.Fatalf("rejected %+v", rejected)
	}

	// Client c1 belongs to group g1: pushed in g2 (by the same principal,
	// here), the sequencer rejects it as unauthorized.
	send(`{"type":"push","requestId":"r2b","clientGroup":"g2","mutations":[{"client":"c1","id":3,"name":"item.put","args":{"collection":"c","id":"a","data":3}}]}`)
	rejected = pushedThenRejected(t, c)
	if rejected.Reason != schemas.ReasonUnauthorized || rejected.Client != "c1" || rejected.ID != 3 || !strings.Contains(rejected.Message, "client group g1") {
		t.Fatalf("c1 in another group: rejected %+v", rejected)
	}

	// Refusals come back as error messages, and the socket stays open.
	// Bytes that are not UTF-8 are refused, naming the field, before they
	// are acknowledged.
	for _, tc := range []struct{ body, code, field string }{
		{"{\"type\":\"push\",\"requestId\":\"u1\",\"clientGroup\":\"g1\",\"mutations\":[{\"client\":\"c1\",\"id\":3,\"name\":\"item.put\",\"args\":{\"collection\":\"c\",\"id\":\"a\",\"data\":\"\xff\"}}]}", "invalid_field", "mutations[0].args"},
		{"{\"type\":\"push\",\"requestId\":\"u2\",\"clientGroup\":\"g\xff\",\"mutations\":[{\"client\":\"c1\",\"id\":3,\"name\":\"item.put\",\"args\":{}}]}", "invalid_field", "clientGroup"},
		{"{\"type\":\"push\",\"requestId\":\"u3\",\"clientGroup\":\"g1\",\"mutations\":[{\"client\":\"c\xc3\",\"id\":3,\"name\":\"item.put\",\"args\":{}}]}", "invalid_field", "mutations[0].client"},
	} {
		send(tc.body)
		if m := c.expect(wire.TypeError); m.Error.Code != tc.code || m.Error.Field != tc.field {
			t.Fatalf("%q: %s, want %s on %s", tc.body, m.raw, tc.code, tc.field)
		}
	}
	for _, tc := range []struct{ body, code string }{
		{`{"type":"push","requestId":"r3","branch":"other","clientGroup":"g1","mutations":[{"client":"c1","id":3,"name":"item.put","args":{}}]}`, wire.CodeWrongBranch},
		{`{"type":"push","requestId":"r4","clientGroup":"g1","mutations":[]}`, "empty_batch"},
		{`{"type":"push","requestId":"r5","clientGroup":"g1","bogus":1}`, "invalid_field"},
		{`{"type":"subscribe","requestId":"r6"}`, wire.CodeUnknownType},
		{`not json`, wire.CodeMalformedMessage},
	} {
		send(tc.body)
		if m := c.expect(wire.TypeError); m.Error.Code != tc.code {
			t.Fatalf("%s: %s, want %s", tc.body, m.raw, tc.code)
		}
	}

	ro, err := dial(t, e.srv, "acme", "pushp", "", bearer(e.token("acme", []string{"pushp"}, time.Hour, auth.ScopeRead)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.close()
	ro.expect(wire.TypeHello)
	if err := ro.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"push","requestId":"x","clientGroup":"g2","mutations":[{"client":"c2","id":1,"name":"item.put","args":{}}]}`)); err != nil {
		t.Fatal(err)
	}
	if m := ro.expect(wire.TypeError); m.Error.Code != wire.CodeForbidden || !strings.Contains(string(m.raw), `"requestId":"x"`) {
		t.Fatalf("read-only push: %s", m.raw)
	}
}

// A client message over the limit closes the socket with 1009.
func testOversized(t *testing.T, e *env) {
	_, srv := e.startLive(e.st, func(c *Config) { c.MaxMessageBytes = 1 << 10 })
	tok := e.token("acme", []string{"big"}, time.Hour, auth.ScopeWrite)
	c, err := dial(t, srv, "acme", "big", "", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.expect(wire.TypeHello)
	big := fmt.Sprintf(`{"type":"push","requestId":"r","clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"collection":"c","id":"a","data":%q}}]}`,
		strings.Repeat("x", 2000+rand.IntN(100)))
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.closeCode(); code != wire.CloseTooBig {
		t.Fatalf("close code %d, want %d", code, wire.CloseTooBig)
	}
}

// On a node that also runs the sequencer, the store holds only the
// partitions the sequencer owns: a subscription to another partition is
// refused with 4004, and one whose partition moves away is closed with
// 4004 (after two ping ticks, to ride out a session restart).
func testNotServed(t *testing.T, e *env) {
	var owned atomic.Bool
	p := e.st.PartitionOf("acme", "movep")
	_, srv := e.startLive(e.st, func(c *Config) {
		c.Serves = func(q int32) bool { return q != p || owned.Load() }
	})
	tok := e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead)
	c, err := dial(t, srv, "acme", "movep", "", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	code, got := c.closeCode()
	c.close()
	if code != wire.CloseNotServed || len(got) != 1 || got[0].Error == nil || got[0].Error.Code != wire.CodeNotServed {
		t.Fatalf("not served: close %d after %v", code, got)
	}

	owned.Store(true)
	c, err = dial(t, srv, "acme", "movep", "", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.expect(wire.TypeHello)
	owned.Store(false)
	code, got = c.closeCode()
	if code != wire.CloseNotServed || len(got) == 0 || got[len(got)-1].Error == nil || got[len(got)-1].Error.Code != wire.CodeNotServed {
		t.Fatalf("moved away: close %d after %v", code, got)
	}
}

// The socket reads the Authorization header with the parser of every
// other route: the scheme in any case, a bare token; another scheme is
// refused (4001) and says what to send, even with a good ?token=.
func testAuthorizationHeader(t *testing.T, e *env) {
	tok := e.token("acme", []string{"authh"}, time.Hour, auth.ScopeRead)
	for _, header := range []string{"bearer " + tok, "BEARER " + tok, tok} {
		cl, err := dial(t, e.srv, "acme", "authh", "", http.Header{"Authorization": {header}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl.expect(wire.TypeHello)
		cl.close()
	}
	cl, err := dial(t, e.srv, "acme", "authh", "token="+tok, http.Header{"Authorization": {"Basic " + tok}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	code, got := cl.closeCode()
	if code != wire.CloseUnauthenticated || len(got) != 1 || got[0].Error == nil || !strings.Contains(got[0].Error.Message, "Bearer TOKEN") {
		t.Fatalf("Basic scheme: close %d after %v, want %d saying what to send", code, got, wire.CloseUnauthenticated)
	}
}

// A socket outlives the HTTP server's request timeouts: they bound a
// request, and the socket keeps deadlines of its own. The socket is
// opened first; once the server closed an idle connection opened after
// it (its read timeout passed), the socket's own did too, and the socket
// still answers.
func testRequestTimeouts(t *testing.T, e *env) {
	_, base := e.startLive(e.st, nil)
	srv := httptest.NewUnstartedServer(base.Config.Handler)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	srv.Start()
	defer srv.Close()
	c, err := dial(t, srv, "acme", "timeouts", "", bearer(e.token("acme", []string{"timeouts"}, time.Hour, auth.ScopeRead)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.expect(wire.TypeHello)
	idle, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetReadDeadline(time.Now().Add(time.Minute)) // only against a hang
	if _, err := io.Copy(io.Discard, idle); err != nil {
		t.Fatalf("the server did not close an idle connection: %v", err)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","requestId":"p"}`)); err != nil {
		t.Fatal(err)
	}
	c.expect(wire.TypePong)
}

// An expired token neither pushes nor reads: a push after the expiry is
// refused with token_expired and the socket closed with 4001, and a
// catch-up stops at the expiry, instead of running to its end before the
// expiry timer of the live loop starts.
func testExpiry(t *testing.T, e *env) {
	const versions = 300
	ids := make([]uint64, versions)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	if err := e.push("acme", "expiry", "x", ids...); err != nil {
		t.Fatal(err)
	}
	e.waitHead("acme", "expiry", "main", versions)
	var late atomic.Bool // the server's clock is past every token's expiry
	_, srv := e.startLive(e.st, func(c *Config) {
		c.Now = func() time.Time {
			if late.Load() {
				return time.Now().Add(24 * time.Hour)
			}
			return time.Now()
		}
		c.CatchUpPage = 1
		c.SendBufferBytes = 4 << 10
	})
	tok := e.token("acme", []string{"expiry"}, time.Hour, auth.ScopeWrite)

	cl, err := dial(t, srv, "acme", "expiry", "token="+tok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	cl.expect(wire.TypeHello)
	late.Store(true)
	if err := cl.ws.WriteJSON(wire.PushMessage{Type: wire.TypePush, RequestID: "r1", ClientGroup: "g-y", Mutations: []wire.PushMutation{
		{Client: "y", ID: 1, Name: "item.put", Args: json.RawMessage(`{"collection":"c","id":"y","data":1}`)}}}); err != nil {
		t.Fatal(err)
	}
	code, got := cl.closeCode()
	for _, m := range got {
		if m.Type == wire.TypePushed {
			t.Fatalf("a push after the token's expiry was taken: %s", m.raw)
		}
	}
	if code != wire.CloseUnauthenticated || len(got) == 0 || got[len(got)-1].Error == nil || got[len(got)-1].Error.Code != wire.CodeTokenExpired {
		t.Fatalf("push after the expiry: close %d after %v, want 4001 after token_expired", code, got)
	}

	// A catch-up of 300 versions to a client that reads nothing yet: the
	// server blocks on the socket after a few, the token expires, and
	// the rest is not sent.
	late.Store(false)
	cc, err := dial(t, srv, "acme", "expiry", "from=0&token="+tok, nil, smallReadBuffer())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.close()
	// It cannot send them all before this client reads past the hello:
	// the socket's buffers hold a few dozen.
	cc.expect(wire.TypeHello)
	late.Store(true)
	code, got = cc.closeCode()
	n := 0
	for _, m := range got {
		if m.Type == wire.TypeVersion {
			n++
		}
	}
	if code != wire.CloseUnauthenticated || n >= versions || got[len(got)-1].Error == nil || got[len(got)-1].Error.Code != wire.CodeTokenExpired {
		t.Fatalf("catch-up past the expiry: close %d after %d of %d versions, want 4001 token_expired before the end", code, n, versions)
	}
}

// pushedThenRejected reads the pushed acknowledgement of a push and the
// rejection of its mutation, in either order; any other message fails.
func pushedThenRejected(t *testing.T, c *client) wire.RejectedMessage {
	t.Helper()
	var rejected wire.RejectedMessage
	for sawPushed := false; !sawPushed || rejected.Type == ""; {
		m, err := c.next(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case wire.TypePushed:
			sawPushed = true
		case wire.TypeRejected:
			if err := json.Unmarshal(m.raw, &rejected); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected %s", m.raw)
		}
	}
	return rejected
}
