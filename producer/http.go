package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

func (p *Producer) handlePush(w http.ResponseWriter, r *http.Request) {
	in, ok := p.accept(w, r, "canon")
	if !ok {
		return
	}
	defer in.release()
	var req wire.PushRequest
	var aerr *wire.Error
	if in.compactArgs, aerr = wire.DecodePush(in.body, &req); aerr != nil {
		p.fail(w, "canon", aerr)
		return
	}
	wait, aerr := p.waitParams(r)
	if aerr != nil {
		p.fail(w, "canon", aerr)
		return
	}
	written, ok := p.ingest(w, r, in, req.Branch, req.ClientGroup, req.Mutations)
	if !ok {
		return
	}
	if wait == 0 {
		writePushResponse(w, http.StatusOK, &wire.PushResponse{Mutations: written})
		return
	}
	// The answer comes after the wait, later than the server's write
	// timeout may allow: this request's deadline covers the wait.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + writeMargin))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	outcomes, err := p.watch.wait(ctx, written)
	if err != nil {
		aerr := httpapi.Internal(p.cfg.Log, http.StatusServiceUnavailable, wire.CodeUnavailable,
			"the mutations were written, but their outcomes cannot be followed",
			"read them with the read API, or push again: applied ones are duplicates", err,
			"org", in.org, "project", in.project)
		aerr.RetryAfter = 1
		p.fail(w, "canon", aerr)
		return
	}
	p.waitReadable(ctx, outcomes)
	status := http.StatusOK
	resp := wire.PushResponse{Mutations: written, Outcomes: make([]wire.Outcome, len(outcomes))}
	for i, o := range outcomes {
		resp.Outcomes[i] = o.Outcome
		if o.Status == wire.OutcomeTimeout {
			// Written and acknowledged, not decided yet.
			status = http.StatusAccepted
		}
	}
	writePushResponse(w, status, &resp)
}

// waitReadable waits until the node's read API serves the outcomes
// (Config.Readable); those it does not serve within the wait become
// timeouts, since answering applied promises that a read here sees them.
func (p *Producer) waitReadable(ctx context.Context, outcomes []outcome) {
	if p.cfg.Readable == nil {
		return
	}
	need := map[int32]int64{}
	for _, o := range outcomes {
		if o.next > 0 {
			need[o.Partition] = max(need[o.Partition], o.next)
		}
	}
	for partition, next := range need {
		if err := p.cfg.Readable(ctx, partition, next); err != nil {
			p.cfg.Log.Warn("push outcome not readable on this node within the wait", "partition", partition, "offset", next, "err", err)
			for i, o := range outcomes {
				if o.Partition == partition && o.next > 0 {
					outcomes[i] = outcome{Outcome: wire.Outcome{Written: o.Written, Status: wire.OutcomeTimeout}}
				}
			}
		}
	}
}

// writeMargin is the time an answer has to be written after a wait.
const writeMargin = 10 * time.Second

// waitParams reads ?wait= and ?timeout=: how long the push waits for its
// outcomes, 0 for not at all.
func (p *Producer) waitParams(r *http.Request) (time.Duration, *wire.Error) {
	q := r.URL.Query()
	switch q.Get("wait") {
	case "":
		if q.Has("timeout") {
			return 0, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "timeout",
				Message: "timeout without wait", Hint: "add wait=applied, or drop timeout"}
		}
		return 0, nil
	case "applied":
	default:
		return 0, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "wait",
			Message: fmt.Sprintf("wait=%q is not known", q.Get("wait")), Hint: "use wait=applied, or leave it out to answer once Kafka acknowledged"}
	}
	if p.watch == nil {
		return 0, &wire.Error{Status: http.StatusNotImplemented, Code: wire.CodeNoWait,
			Message: "this producer does not follow the versions topic", Hint: "push without wait=applied and read the outcome with the read API"}
	}
	if aerr := p.watch.errNotFollowing(); aerr != nil {
		return 0, aerr
	}
	d := DefaultWait
	if s := q.Get("timeout"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 || d > p.cfg.MaxWait {
			return 0, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "timeout",
				Message: fmt.Sprintf("timeout=%q is not a duration between 0 and %v", s, p.cfg.MaxWait), Hint: "use a Go duration such as 500ms or 5s"}
		}
	}
	return min(d, p.cfg.MaxWait), nil
}

// incoming is a push that passed authentication and whose body was read.
type incoming struct {
	api          string // canon or replicache, for the metrics
	org, project string
	claims       *auth.Claims
	body         []byte
	start        time.Time
	// compactArgs says which mutations' args decoding found to be compact
	// JSON (nil: none known).
	compactArgs []bool
	buf         *bytes.Buffer // holds body
}

// bodies are buffers for request bodies: a push's body is garbage as soon
// as it is answered, and it is the largest allocation of a push.
var bodies sync.Pool

// maxPooledBody bounds the buffers kept for reuse.
const maxPooledBody = 1 << 20

// A body's first headBytes are read into a buffer of heads; the body's
// own buffer is at first at most maxPreallocBody bytes (what
// Content-Length announced, if less) and grows as the bytes arrive.
const (
	headBytes       = 4 << 10
	maxPreallocBody = 64 << 10
)

var heads = sync.Pool{New: func() any { return new([headBytes]byte) }}

// release gives the body's buffer back for another request. Nothing may
// use the body, or the args that alias it, afterwards: the handlers
// release it when they return, when every record has its own copy.
func (in *incoming) release() {
	if in.buf != nil && in.buf.Cap() <= maxPooledBody {
		bodies.Put(in.buf)
	}
	in.buf, in.body = nil, nil
}

// accept authenticates a push for write access and reads its body; on
// false it has answered with the error.
func (p *Producer) accept(w http.ResponseWriter, r *http.Request, api string) (*incoming, bool) {
	in := &incoming{api: api, org: r.PathValue("org"), project: r.PathValue("project"), start: p.cfg.Now()}
	var aerr *wire.Error
	if in.claims, aerr = p.authorize(r, in.org, in.project); aerr == nil {
		if in.body, in.buf, aerr = p.readBody(w, r); aerr == nil {
			if aerr = wire.CheckUTF8(in.body); aerr != nil {
				in.release()
			}
		}
	}
	if aerr != nil {
		p.fail(w, api, aerr)
		return nil, false
	}
	return in, true
}

// ingest validates a push's mutations, writes them and counts them; on
// false it has answered with the error.
func (p *Producer) ingest(w http.ResponseWriter, r *http.Request, in *incoming, branch, group string, pms []wire.PushMutation) ([]wire.Written, bool) {
	ms, aerr := p.mutations(in.org, in.project, branch, group, in.claims, pms, in.start)
	if aerr != nil {
		p.fail(w, in.api, aerr)
		return nil, false
	}
	written, aerr := p.write(r.Context(), in.claims, ms, in.compactArgs, in.start)
	if aerr != nil {
		p.fail(w, in.api, aerr)
		return nil, false
	}
	p.m.observe(in.api, len(ms), p.cfg.Now().Sub(in.start))
	return written, true
}

// Push validates and writes a push of an already authenticated principal,
// with the same rules, limits and errors as the HTTP endpoint: the
// websocket uses it for mutations pushed on the socket. claims must allow
// writing to org/project.
func (p *Producer) Push(ctx context.Context, claims *auth.Claims, org, project string, req wire.PushRequest) ([]wire.Written, *wire.Error) {
	if err := claims.Allow(org, project, auth.ScopeWrite); err != nil {
		return nil, authError(err)
	}
	start := p.cfg.Now()
	ms, aerr := p.mutations(org, project, req.Branch, req.ClientGroup, claims, req.Mutations, start)
	if aerr == nil {
		var written []wire.Written
		if written, aerr = p.write(ctx, claims, ms, nil, start); aerr == nil {
			p.m.observe("ws", len(ms), p.cfg.Now().Sub(start))
			return written, nil
		}
	}
	p.m.refused("ws", aerr.Code)
	return nil, aerr
}

// authorize checks the bearer token for write access to org/project.
func (p *Producer) authorize(r *http.Request, org, project string) (*auth.Claims, *wire.Error) {
	if err := schemas.ValidateOrg("org", org); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "org", Message: err.Error()}
	}
	if err := schemas.ValidateProject("project", project); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "project", Message: err.Error()}
	}
	claims, aerr := p.verify(r)
	if aerr != nil {
		return nil, aerr
	}
	if err := claims.Allow(org, project, auth.ScopeWrite); err != nil {
		return nil, authError(err)
	}
	return claims, nil
}

// verify reads and verifies the request's bearer token.
func (p *Producer) verify(r *http.Request) (*auth.Claims, *wire.Error) {
	token, err := auth.BearerToken(r.Header.Get("Authorization"))
	if err != nil {
		return nil, authError(err)
	}
	claims, err := p.cfg.Keys.Verify(token, p.cfg.Now())
	if err != nil {
		return nil, authError(err)
	}
	return claims, nil
}

// readBody checks the content type and reads at most MaxBodyBytes, into
// buf, a buffer of bodies.
func (p *Producer) readBody(w http.ResponseWriter, r *http.Request) (body []byte, buf *bytes.Buffer, _ *wire.Error) {
	if aerr := checkJSONType(r); aerr != nil {
		return nil, nil, aerr
	}
	if r.ContentLength > p.cfg.MaxBodyBytes {
		return nil, nil, p.bodyTooLarge(r.ContentLength)
	}
	// Nothing is reserved for the body before its bytes arrive: a client
	// that announces 4 MiB and sends nothing would otherwise pin 4 MiB
	// until the server's read timeout. Its first bytes go to a small
	// buffer; the body's buffer is taken once they came, and grows with
	// what arrives, from at most maxPreallocBody.
	rd := http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes)
	head := heads.Get().(*[headBytes]byte)
	defer heads.Put(head)
	// Not io.ReadFull: it reports a body cut short (the body's own
	// io.ErrUnexpectedEOF) like one that ended early, which is complete.
	n := 0
	var err error
	for n < len(head) && err == nil {
		var k int
		k, err = rd.Read(head[n:])
		n += k
	}
	if err == nil || errors.Is(err, io.EOF) {
		buf, _ = bodies.Get().(*bytes.Buffer)
		if buf == nil {
			buf = new(bytes.Buffer)
		}
		buf.Reset()
		if err == nil { // more to come
			if r.ContentLength > 0 {
				buf.Grow(int(min(r.ContentLength, maxPreallocBody)) + bytes.MinRead)
			}
			buf.Write(head[:n])
			_, err = buf.ReadFrom(rd)
		} else {
			buf.Write(head[:n])
			err = nil
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, nil, p.bodyTooLarge(-1)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The error names the client's and the server's addresses: no
		// business of the answer's.
		return nil, nil, &wire.Error{Status: http.StatusRequestTimeout, Code: wire.CodeRequestTimeout,
			Message: "the body did not arrive within the server's read timeout", Hint: "send the body as soon as the headers"}
	}
	if err != nil {
		return nil, nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeMalformed, Message: "read body: " + err.Error()}
	}
	return buf.Bytes(), buf, nil
}

// checkJSONType refuses a body that is not application/json.
func checkJSONType(r *http.Request) *wire.Error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &wire.Error{Status: http.StatusUnsupportedMediaType, Code: wire.CodeUnsupportedMedia,
			Message: fmt.Sprintf("content type %q is not application/json", r.Header.Get("Content-Type")),
			Hint:    "send the body as JSON with 'Content-Type: application/json'"}
	}
	return nil
}

func (p *Producer) bodyTooLarge(n int64) *wire.Error {
	msg := fmt.Sprintf("the body is over the limit of %d bytes", p.cfg.MaxBodyBytes)
	if n > 0 {
		msg = fmt.Sprintf("the body is %d bytes, over the limit of %d bytes", n, p.cfg.MaxBodyBytes)
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge, Message: msg,
		Hint: "split the mutations over several pushes"}
}

// mutations validates a request's mutations and stamps them.
func (p *Producer) mutations(org, project, branch, group string, claims *auth.Claims, in []wire.PushMutation, received time.Time) ([]*schemas.Mutation, *wire.Error) {
	if branch == "" {
		branch = schemas.DefaultBranch
	}
	if err := schemas.ValidateBranch("branch", branch); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "branch", Message: err.Error()}
	}
	if err := schemas.ValidateClient("clientGroup", group); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "clientGroup", Message: err.Error()}
	}
	if p.watch != nil {
		if owner, ok := p.watch.owner(org, project, group); ok && owner != claims.Principal() {
			return nil, &wire.Error{Status: http.StatusConflict, Code: wire.CodeGroupOwned, Field: "clientGroup",
				Message: fmt.Sprintf("client group %s of %s/%s belongs to another principal", group, org, project),
				Hint:    "use a client group of your own (one per user agent, e.g. a random id kept by the client)"}
		}
	}
	if len(in) == 0 {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeEmptyBatch, Field: "mutations", Message: "no mutations",
			Hint: "send at least one mutation"}
	}
	if len(in) > p.cfg.MaxBatch {
		return nil, &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge, Field: "mutations",
			Message: fmt.Sprintf("%d mutations, over the limit of %d per push", len(in), p.cfg.MaxBatch),
			Hint:    "split the mutations over several pushes, in order"}
	}
	ms := make([]*schemas.Mutation, len(in))
	block := make([]schemas.Mutation, len(in)) // one allocation, not one per mutation
	last := map[string]uint64{}
	for i, pm := range in {
		if pm.ID == 0 {
			return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: fmt.Sprintf("mutations[%d].id", i),
				Message: "must be an integer >= 1, got 0", Hint: "a client's first mutation has id 1"}
		}
		prev, seen := last[pm.Client]
		if seen && pm.ID != prev+1 {
			return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: fmt.Sprintf("mutations[%d].id", i),
				Message: fmt.Sprintf("client %s sends id %d after %d in the same push: ids must increase by 1", pm.Client, pm.ID, prev)}
		}
		if !seen && p.watch != nil {
			// Once per client of the push: they all have the push's group.
			if g, ok := p.watch.clientGroup(org, project, pm.Client); ok && g != group {
				return nil, &wire.Error{Status: http.StatusConflict, Code: wire.CodeClientOwned, Field: fmt.Sprintf("mutations[%d].client", i),
					Message: fmt.Sprintf("client %s of %s/%s belongs to client group %s, not %s", pm.Client, org, project, g, group),
					Hint:    "a client belongs to one client group: give each client of this group a new client id (e.g. a random id kept by the client)"}
			}
		}
		last[pm.Client] = pm.ID
		args := pm.Args
		if len(args) == 0 {
			args = json.RawMessage("null")
		}
		block[i] = schemas.Mutation{Org: org, Project: project, Branch: branch, ClientGroup: group, Client: pm.Client,
			ID: pm.ID, Name: pm.Name, Args: args, TS: pm.TS, Principal: claims.Principal(), ReceivedAt: received.UnixMilli()}
		ms[i] = &block[i]
	}
	return ms, nil
}

// write encodes (validating every field and limit), rate-limits and
// produces the mutations. compactArgs[i] says that decoding found the
// args of ms[i] to be compact JSON; the others are checked here.
func (p *Producer) write(ctx context.Context, claims *auth.Claims, ms []*schemas.Mutation, compactArgs []bool, received time.Time) ([]wire.Written, *wire.Error) {
	values := make([][]byte, len(ms))
	for i, m := range ms {
		encode := schemas.EncodeMutation
		if i < len(compactArgs) && compactArgs[i] {
			encode = schemas.EncodeCheckedMutation
		} else if valid, compact := schemas.CheckJSON(m.Args); valid && compact {
			// Checked at the speed of schemas' JSON checker: no second scan by encoding/json's.
			encode = schemas.EncodeCheckedMutation
		}
		v, err := encode(m, p.cfg.Limits)
		if err != nil {
			return nil, fieldError(i, err)
		}
		values[i] = v
	}
	// A subject is unique within its issuer and org only: the same one in
	// two orgs is two principals, with two buckets.
	key := claims.Issuer + "\x00" + claims.Org + "\x00" + claims.Subject
	if wait, ok := p.limiter.allow(key, len(ms), received); !ok {
		return nil, &wire.Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited,
			Message:    fmt.Sprintf("%s of org %s is over its rate of %.0f mutations per second", claims.Principal(), claims.Org, p.cfg.Rate),
			Hint:       "retry after the Retry-After seconds, in order",
			RetryAfter: int(math.Ceil(wait.Seconds()))}
	}
	written, err := p.produce(ctx, ms, values, received)
	if err != nil {
		aerr := httpapi.Internal(p.cfg.Log, http.StatusServiceUnavailable, wire.CodeUnavailable,
			"the mutations could not be written to Kafka",
			"retry the same push: mutations already written are skipped as duplicates", err,
			"org", ms[0].Org, "project", ms[0].Project)
		aerr.RetryAfter = 1
		return nil, aerr
	}
	return written, nil
}

func (p *Producer) fail(w http.ResponseWriter, api string, e *wire.Error) {
	p.m.refused(api, e.Code)
	writeError(w, e)
}
