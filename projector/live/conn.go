package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// conn is one websocket subscription. Its handler goroutine is the only
// writer of data messages; a reader goroutine takes client messages and
// hands answers to the writer through replies.
type conn struct {
	s      *Server
	ws     *websocket.Conn
	claims *auth.Claims

	org, project, branch string
	partition            int32
	from                 *uint64

	sub      *subscriber
	lastSent uint64
	spare    []entry
	batch    [][]byte

	replies  chan []byte
	quit     chan struct{} // closed when the writer stops taking replies
	readDone chan struct{} // closed when the reader ends
	ctx      context.Context
	cancel   context.CancelFunc
	// expired is closed when the reader finds the token expired (a push
	// after the expiry), for the writer to close the socket.
	expired    chan struct{}
	expireOnce sync.Once
}

// closeReason is why the server ends a subscription: a close code and the
// error message sent before the close frame.
type closeReason struct {
	code int
	err  *wire.Error
}

func closeWith(code int, errCode, msg, hint string) *closeReason {
	return &closeReason{code: code, err: &wire.Error{Code: errCode, Message: msg, Hint: hint}}
}

// errGone: the connection ended while the server waited (the client left
// or the server is stopping); there is nobody to tell.
var errGone = errors.New("connection gone")

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered with the HTTP error
	}
	if !s.enter() {
		c := &conn{s: s, ws: ws}
		c.start()
		c.finish(closeWith(wire.CloseGoingAway, wire.CodeGoingAway, "the server is shutting down", "reconnect and resume"))
		return
	}
	defer s.leave()
	if s.cfg.SendBufferBytes > 0 {
		if tc, ok := ws.NetConn().(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(s.cfg.SendBufferBytes)
		}
	}
	c := &conn{s: s, ws: ws, org: r.PathValue("org"), project: r.PathValue("project")}
	reason := c.accept(r)
	c.start()
	if reason != nil {
		c.finish(reason)
		return
	}
	c.finish(c.serve())
}

// start begins reading client messages. What accept set is only read by
// the reader after this; messages of a refused subscription are ignored.
func (c *conn) start() {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.replies = make(chan []byte, 16)
	c.quit = make(chan struct{})
	c.readDone = make(chan struct{})
	c.expired = make(chan struct{})
	go c.readLoop()
}

// tokenExpired reports whether the subscription's token has expired:
// checked on every push and every catch-up page, not only by the timer
// of the live loop, so that an expired token neither writes nor reads.
func (c *conn) tokenExpired() bool {
	select {
	case <-c.expired:
		return true
	default:
	}
	exp := c.claims.ExpiresAt
	if exp == nil || c.s.cfg.Now().Before(exp.Time) {
		return false
	}
	c.expireOnce.Do(func() { close(c.expired) })
	return true
}

func expiredReason() *closeReason {
	return closeWith(wire.CloseUnauthenticated, wire.CodeTokenExpired, "the token expired", "reconnect with a new token and resume")
}

// accept checks the subscription and the token.
func (c *conn) accept(r *http.Request) *closeReason {
	q := r.URL.Query()
	c.branch = q.Get("branch")
	if c.branch == "" {
		c.branch = schemas.DefaultBranch
	}
	for _, check := range []error{
		schemas.ValidateOrg("org", c.org),
		schemas.ValidateProject("project", c.project),
		schemas.ValidateBranch("branch", c.branch),
	} {
		if check != nil {
			return closeWith(wire.CloseBadRequest, wire.CodeBadRequest, check.Error(), "")
		}
	}
	if q.Has("from") {
		v, err := strconv.ParseUint(q.Get("from"), 10, 64)
		if err != nil {
			return closeWith(wire.CloseBadRequest, wire.CodeBadRequest, fmt.Sprintf("from=%q is not a version number", q.Get("from")),
				"give the last version you hold, 0 for all versions, or leave from out for live versions only")
		}
		c.from = &v
	}
	token, err := auth.BearerToken(r.Header.Get("Authorization"))
	if err == nil && token == "" {
		token = strings.TrimSpace(q.Get("token")) // browsers cannot set the header
	}
	var claims *auth.Claims
	if err == nil {
		claims, err = c.s.cfg.Keys.Verify(token, c.s.cfg.Now())
	}
	if err == nil {
		err = claims.Allow(c.org, c.project, auth.ScopeRead)
	}
	switch {
	case errors.Is(err, auth.ErrForbidden):
		return closeWith(wire.CloseForbidden, wire.CodeForbidden, err.Error(), "use a token issued for this org and project with the read scope")
	case errors.Is(err, auth.ErrNoToken):
		return closeWith(wire.CloseUnauthenticated, wire.CodeUnauthenticated, "no token",
			"send 'Authorization: Bearer TOKEN' or ?token=TOKEN (browsers can only do the latter)")
	case err != nil:
		return closeWith(wire.CloseUnauthenticated, wire.CodeUnauthenticated, err.Error(), "get a valid, unexpired token")
	}
	c.claims = claims
	c.partition = c.s.cfg.Store.PartitionOf(c.org, c.project)
	if !c.s.hub.follows(c.partition) || !c.served() {
		return closeWith(wire.CloseNotServed, wire.CodeNotServed,
			fmt.Sprintf("%s/%s is on partition %d, which this server does not follow", c.org, c.project, c.partition),
			"connect to a server that serves the partition")
	}
	return nil
}

// serve runs an accepted subscription: hello, reset if need be, catch-up
// from the store, then live versions until the socket ends.
func (c *conn) serve() *closeReason {
	c.sub = newSubscriber(projectKey{c.org, c.project}, c.branch, c.s.cfg.QueueSize)
	need := c.s.hub.subscribe(c.sub, c.partition)
	defer c.s.hub.unsubscribe(c.sub)

	if err := c.waitStore(need); err != nil {
		return c.storeFailure(err)
	}
	head, err := c.head()
	if err != nil {
		return c.storeFailure(err)
	}
	var reset *wire.ResetMessage
	switch {
	case c.from == nil:
		c.lastSent = head
	case *c.from <= head:
		c.lastSent = *c.from
	default:
		// The version may be on its way to the store: give it a moment.
		deadline := time.Now().Add(c.s.cfg.ResetGrace)
		for head < *c.from && time.Now().Before(deadline) {
			if err := c.pause(10 * time.Millisecond); err != nil {
				return c.storeFailure(err)
			}
			if head, err = c.head(); err != nil {
				return c.storeFailure(err)
			}
		}
		c.lastSent = min(*c.from, head)
		if head < *c.from {
			reason := wire.ReasonFutureVersion
			if head == 0 {
				reason = wire.ReasonUnknownBranch
			}
			reset = &wire.ResetMessage{Type: wire.TypeReset, Reason: reason, Branch: c.branch, From: *c.from, Head: head}
		}
	}
	hello := wire.HelloMessage{Type: wire.TypeHello, Protocol: wire.Protocol, Org: c.org, Project: c.project, Branch: c.branch, From: c.from,
		Head: head, MaxMessageBytes: c.s.cfg.MaxMessageBytes, PingSeconds: int(c.s.cfg.PingInterval / time.Second),
		Push: c.s.cfg.Pusher != nil}
	if err := c.writeJSON(hello); err != nil {
		return nil
	}
	if reset != nil {
		if err := c.writeJSON(reset); err != nil {
			return nil
		}
	}
	// Catch up from the store; versions that did not fit the queue
	// meanwhile are read from the store in another round.
	for {
		if reason := c.readStore(0); reason != nil || c.gone() {
			return reason
		}
		skipped := c.sub.caughtUp()
		if skipped == 0 {
			break
		}
		if err := c.waitStore(skipped); err != nil {
			return c.storeFailure(err)
		}
	}
	return c.live()
}

// live writes queued messages, replies and pings until the socket ends.
func (c *conn) live() *closeReason {
	ping := time.NewTicker(c.s.cfg.PingInterval)
	defer ping.Stop()
	unserved := 0 // ping ticks in a row that found the partition not served
	var expiry <-chan time.Time
	if exp := c.claims.ExpiresAt; exp != nil {
		t := time.NewTimer(exp.Sub(c.s.cfg.Now()))
		defer t.Stop()
		expiry = t.C
	}
	for {
		select {
		case <-c.sub.notify:
			if reason, err := c.drain(); reason != nil || err != nil {
				return reason
			}
		case b := <-c.replies:
			if c.write(b) != nil {
				return nil
			}
		case <-ping.C:
			// Twice in a row: a sequencer that restarts its session on
			// this node gives its partitions up for a moment.
			if c.served() {
				unserved = 0
			} else if unserved++; unserved == 2 {
				return c.moved()
			}
			if c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.WriteTimeout)) != nil {
				return nil
			}
		case <-expiry:
			return expiredReason()
		case <-c.expired:
			return expiredReason()
		case <-c.readDone:
			return nil
		case <-c.s.done:
			return closeWith(wire.CloseGoingAway, wire.CodeGoingAway, "the server is shutting down", "reconnect and resume")
		}
	}
}

// drain writes what the hub queued. A version ahead of the last one sent
// means the ones between were published before this subscription saw the
// hub, or dropped during catch-up: they are read from the store first,
// once it holds them. err is a broken socket.
func (c *conn) drain() (*closeReason, error) {
	entries, overflow := c.sub.take(c.spare)
	c.spare = entries
	if overflow {
		return closeWith(wire.CloseSlow, wire.CodeSlow, fmt.Sprintf("the client reads too slowly: more than %d messages waited for it", c.s.cfg.QueueSize),
			fmt.Sprintf("reconnect with from=%d (the last version received)", c.lastSent)), nil
	}
	// The hub hands out versions as the changelog tail reads them, and
	// the store of this node applies them just after Kafka committed
	// them: a client that reads this node when a version arrives (a
	// Replicache pull on a poke) must find it, so none is sent before
	// the store holds it.
	need := int64(-1)
	for _, e := range entries {
		if e.version > c.lastSent {
			need = max(need, e.offset+1)
		}
	}
	if need > 0 {
		if err := c.waitStore(need); err != nil {
			return c.storeFailure(err), err
		}
	}
	c.batch = c.batch[:0]
	versions := 0
	for _, e := range entries {
		if e.version != 0 {
			if e.version <= c.lastSent {
				continue
			}
			if e.version > c.lastSent+1 {
				// What is batched goes first, then the gap from the store.
				if err := c.flush(versions); err != nil {
					return nil, err
				}
				versions = 0
				c.s.m.storeFills.Inc()
				if err := c.waitStore(e.offset); err != nil {
					return c.storeFailure(err), err
				}
				if reason := c.readStore(e.version - 1); reason != nil || c.gone() {
					return reason, errGone
				}
			}
			c.lastSent = e.version
			versions++
		}
		c.batch = append(c.batch, e.frame)
	}
	return nil, c.flush(versions)
}

// flush writes the batched frames in one system call (writev). The frames
// go to the socket beside the websocket library, which is safe: a write
// of a net.Conn is atomic, every buffer is a whole frame, and the library
// writes only control frames (pong, close) from other goroutines, which
// may come between data frames. gorilla's PreparedMessage, made for the
// same encode-once fan-out, writes one message per system call:
// BenchmarkRawWrites compares the two, and BenchmarkFanOut measured the
// library's way 1.8 to 2.6 times slower per version than this one (the
// commit that removed it has the figures).
func (c *conn) flush(versions int) error {
	if len(c.batch) == 0 {
		return nil
	}
	nc := c.ws.NetConn()
	_ = nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	bufs := net.Buffers(c.batch)
	_, err := bufs.WriteTo(nc)
	if err != nil {
		return err
	}
	c.s.m.sentVersion.Add(float64(versions))
	c.s.m.sentOther.Add(float64(len(c.batch) - versions))
	clear(c.batch)
	c.batch = c.batch[:0]
	return nil
}

// readStore writes the versions after lastSent from the store: up to upTo,
// which the store must hold, or with upTo 0 as far as it has them. Between
// pages it answers replies. It returns nil with c.gone() when the socket
// broke.
func (c *conn) readStore(upTo uint64) *closeReason {
	for upTo == 0 || c.lastSent < upTo {
		if c.tokenExpired() {
			return expiredReason()
		}
		limit := c.s.cfg.CatchUpPage
		if upTo > 0 {
			limit = int(min(uint64(limit), upTo-c.lastSent))
		}
		vs, err := c.s.cfg.Store.Versions(c.org, c.project, c.branch, c.lastSent+1, limit)
		if err != nil {
			return c.storeFailure(err)
		}
		if len(vs) == 0 {
			if upTo == 0 {
				return nil
			}
			return c.storeFailure(fmt.Errorf("the store holds no version %d of %s/%s branch %s though it reached the changelog position of version %d",
				c.lastSent+1, c.org, c.project, c.branch, upTo+1))
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		for i := range vs {
			v := &vs[i]
			if v.Version != c.lastSent+1 {
				return c.storeFailure(fmt.Errorf("the store gave version %d after %d of %s/%s branch %s", v.Version, c.lastSent, c.org, c.project, c.branch))
			}
			b, err := encodeVersion(v)
			if err != nil {
				return c.storeFailure(err)
			}
			if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				c.cancel()
				return nil
			}
			c.lastSent = v.Version
			c.s.m.sentVersion.Inc()
			c.s.m.catchUp.Inc()
		}
		for more := true; more; {
			select {
			case b := <-c.replies:
				if c.write(b) != nil {
					c.cancel()
					return nil
				}
			default:
				more = false
			}
		}
		if c.gone() {
			return nil
		}
	}
	return nil
}

// served reports whether the store holds the subscription's partition.
func (c *conn) served() bool { return c.s.cfg.Serves == nil || c.s.cfg.Serves(c.partition) }

// moved closes a subscription whose partition this server stopped
// holding (another sequencer instance took it over).
func (c *conn) moved() *closeReason {
	return closeWith(wire.CloseNotServed, wire.CodeNotServed,
		fmt.Sprintf("%s/%s is on partition %d, which this server no longer serves", c.org, c.project, c.partition),
		fmt.Sprintf("reconnect with from=%d: the server that serves the partition now resumes the stream", c.lastSent))
}

// waitStore waits until the store holds the partition's changelog up to
// (not including) offset need.
func (c *conn) waitStore(need int64) error {
	st := c.s.cfg.Store
	off, err := st.Applied(c.partition)
	if err != nil || need <= 0 || off >= need {
		return err
	}
	deadline := time.Now().Add(c.s.cfg.StoreLagTimeout)
	for {
		if !c.served() {
			return errNotServed
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("%w: the store is at offset %d of partition %d, the changelog at %d, after %v",
				errStoreBehind, off, c.partition, need, c.s.cfg.StoreLagTimeout)
		}
		// In slices, to notice a partition that moved away or a client
		// that left.
		ctx, cancel := context.WithTimeout(c.ctx, min(wait, storeCheckInterval))
		err := st.WaitApplied(ctx, c.partition, need)
		cancel()
		if err == nil {
			return nil
		}
		if c.gone() {
			return errGone
		}
		if ctx.Err() == nil {
			return err
		}
		if off, err = st.Applied(c.partition); err != nil {
			return err
		}
	}
}

// storeCheckInterval is how often a wait for the store checks that the
// partition is still served and the client still there.
const storeCheckInterval = 50 * time.Millisecond

var (
	errStoreBehind = errors.New("store behind the changelog")
	errNotServed   = errors.New("partition no longer served")
)

// pause waits d unless the connection ends first.
func (c *conn) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.readDone:
	case <-c.s.done:
	case <-c.ctx.Done():
	}
	return errGone
}

func (c *conn) head() (uint64, error) {
	h, err := c.s.cfg.Store.Head(c.org, c.project, c.branch)
	return h.Version, err
}

// gone reports whether the socket ended or the server stops.
func (c *conn) gone() bool {
	select {
	case <-c.readDone:
		return true
	case <-c.s.done:
		return true
	case <-c.ctx.Done():
		return true
	default:
		return false
	}
}

func (c *conn) storeFailure(err error) *closeReason {
	switch {
	case errors.Is(err, errGone):
		if c.gone() {
			select {
			case <-c.s.done:
				return closeWith(wire.CloseGoingAway, wire.CodeGoingAway, "the server is shutting down", "reconnect and resume")
			default:
				return nil
			}
		}
		return nil
	case errors.Is(err, errNotServed):
		return c.moved()
	case errors.Is(err, errStoreBehind):
		c.s.cfg.Log.Warn("live subscription: store behind the changelog", "org", c.org, "project", c.project, "err", err)
		return closeWith(wire.CloseServerError, wire.CodeStoreBehind, "the server's store lags the changelog",
			fmt.Sprintf("reconnect with from=%d (the last version received)", c.lastSent))
	default:
		c.s.cfg.Log.Error("live subscription: read the store", "org", c.org, "project", c.project, "err", err)
		return closeWith(wire.CloseServerError, wire.CodeStoreError, "the server could not read its store",
			fmt.Sprintf("reconnect with from=%d (the last version received)", c.lastSent))
	}
}

func (c *conn) write(b []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	err := c.ws.WriteMessage(websocket.TextMessage, b)
	if err == nil {
		c.s.m.sentOther.Inc()
	}
	return err
}

func (c *conn) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.write(b)
}

// finish ends the connection: with a reason, an error message and a close
// frame, then a wait for the client's close (so that it reads everything
// written before, rather than a reset), bounded by the write timeout.
func (c *conn) finish(reason *closeReason) {
	close(c.quit)
	if reason != nil {
		c.s.m.closed(reason.code)
		if reason.code == wire.CloseSlow {
			c.s.cfg.Log.Info("close slow subscriber", "org", c.org, "project", c.project, "branch", c.branch, "last", c.lastSent)
		}
		if c.writeJSON(wire.ErrorMessage{Type: wire.TypeError, Error: reason.err}) == nil {
			text := reason.err.Code
			deadline := time.Now().Add(c.s.cfg.WriteTimeout)
			if c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(reason.code, text), deadline) == nil {
				t := time.NewTimer(c.s.cfg.WriteTimeout)
				select {
				case <-c.readDone:
				case <-t.C:
				}
				t.Stop()
			}
		}
	}
	c.cancel()
	_ = c.ws.Close()
	<-c.readDone
}

// readLoop reads client messages until the socket ends. A message over
// MaxMessageBytes ends it with 1009 (sent by the websocket library).
func (c *conn) readLoop() {
	defer close(c.readDone)
	c.ws.SetReadLimit(c.s.cfg.MaxMessageBytes)
	pongWait := c.s.cfg.PongWait
	_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(pongWait)) })
	for {
		typ, b, err := c.ws.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				c.s.m.closed(wire.CloseTooBig)
			}
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
		select {
		case <-c.quit:
			continue // closing: nothing more is answered
		default:
		}
		if c.claims == nil {
			continue
		}
		if reply := c.handle(typ, b); reply != nil {
			select {
			case c.replies <- reply:
			case <-c.quit:
			}
		}
	}
}

// clientMessage is what every client message has.
type clientMessage struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
}

// handle answers one client message.
func (c *conn) handle(typ int, b []byte) []byte {
	var head clientMessage
	if typ != websocket.TextMessage {
		return c.errorReply("", &wire.Error{Code: wire.CodeMalformedMessage, Message: "binary messages are not part of the protocol", Hint: "send JSON text messages"})
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return c.errorReply("", &wire.Error{Code: wire.CodeMalformedMessage, Message: "the message is not a JSON object: " + err.Error()})
	}
	switch head.Type {
	case wire.TypePing:
		return mustJSON(wire.PongMessage{Type: wire.TypePong, RequestID: head.RequestID})
	case wire.TypePush:
		return c.push(head.RequestID, b)
	default:
		return c.errorReply(head.RequestID, &wire.Error{Code: wire.CodeUnknownType, Field: "type",
			Message: fmt.Sprintf("unknown message type %q", head.Type), Hint: "send push or ping"})
	}
}

func (c *conn) push(requestID string, b []byte) []byte {
	if perr := wire.CheckUTF8(b); perr != nil {
		return c.pushError(requestID, perr)
	}
	var msg wire.PushMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return c.pushError(requestID, &wire.Error{Code: wire.CodeInvalid, Message: "the push message does not decode: " + err.Error()})
	}
	if c.tokenExpired() {
		return c.pushError(requestID, &wire.Error{Code: wire.CodeTokenExpired, Message: "the token expired: the push was not taken",
			Hint: "reconnect with a new token, resume, and push again"})
	}
	if c.s.cfg.Pusher == nil {
		return c.pushError(requestID, &wire.Error{Code: wire.CodePushDisabled, Message: "this server does not take pushes on the websocket",
			Hint: "push over HTTP: POST /v1/projects/{org}/{project}/push"})
	}
	if msg.Branch != "" && msg.Branch != c.branch {
		return c.pushError(requestID, &wire.Error{Code: wire.CodeWrongBranch, Field: "branch",
			Message: fmt.Sprintf("the socket is subscribed to branch %q, not %q", c.branch, msg.Branch),
			Hint:    "push to another branch on its own socket or over HTTP"})
	}
	written, perr := c.s.cfg.Pusher.Push(c.ctx, c.claims, c.org, c.project,
		wire.PushRequest{Branch: c.branch, ClientGroup: msg.ClientGroup, Mutations: msg.Mutations})
	if perr != nil {
		return c.pushError(requestID, perr)
	}
	c.s.m.pushes.WithLabelValues("ok").Inc()
	return mustJSON(wire.PushedMessage{Type: wire.TypePushed, RequestID: requestID, Mutations: written})
}

func (c *conn) pushError(requestID string, e *wire.Error) []byte {
	c.s.m.pushes.WithLabelValues(e.Code).Inc()
	return c.errorReply(requestID, e)
}

func (c *conn) errorReply(requestID string, e *wire.Error) []byte {
	return mustJSON(wire.ErrorMessage{Type: wire.TypeError, RequestID: requestID, Error: e})
}

// mustJSON encodes the protocol's own message types, which hold only
// strings and numbers; should one ever fail, the client still gets an
// error message rather than nothing.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(wire.ErrorMessage{Type: wire.TypeError, Error: &wire.Error{Code: wire.CodeMalformedMessage,
			Message: fmt.Sprintf("the server could not encode its answer: %v", err)}})
	}
	return b
}
