// Package client is Canon's Go client for the push API: a Client sends
// pushes with retries that keep their order, and a Writer is one Canon
// client (a client id in a client group) that numbers its mutations,
// keeps those not yet decided, and resends them after a gap.
//
//	c := client.New("http://localhost:8080", client.WithToken(token))
//	w := c.Writer("acme", "roadmap", client.WriterConfig{ClientGroup: "tab-1", Client: "tab-1"})
//	w.Add("item.put", map[string]any{"collection": "tasks", "id": "t1", "data": map[string]any{"title": "Ship"}})
//	outcomes, err := w.Flush(ctx)
//
// Only the standard library is used (and Canon's wire and schemas, which
// use only the standard library too), so programs that push to Canon do
// not link Kafka or Pebble.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/canon-sync/canon/wire"
)

// The wire types of a push, as the wire package declares them (and the
// server decodes them).
type (
	// Push is the body of a push: mutations of one client group on one
	// branch of a project.
	Push = wire.PushRequest
	// Mutation is one mutation of a push.
	Mutation = wire.PushMutation
	// Result answers a push: where Kafka wrote each mutation, and with
	// PushOptions.Wait their outcomes.
	Result = wire.PushResponse
	// Written is where Kafka acknowledged a mutation.
	Written = wire.Written
	// Outcome is what became of a mutation (a push with Wait).
	Outcome = wire.Outcome
	// Error is Canon's error answer, with the HTTP status and the
	// Retry-After seconds (for 429 and 503).
	Error = wire.Error
)

// Outcome statuses.
const (
	Applied   = wire.OutcomeApplied
	Errored   = wire.OutcomeError
	Duplicate = wire.OutcomeDuplicate
	Rejected  = wire.OutcomeRejected
	Timeout   = wire.OutcomeTimeout
)

// retryable reports whether the same push may be sent again: the server
// wrote nothing (429), or may have written it and says so (503), in which
// case the mutations already written are skipped as duplicates.
func retryable(e *Error) bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable ||
		e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
}

// Client talks to Canon's HTTP API. It is safe for concurrent use.
type Client struct {
	base string
	// read is the read API's base URL (default base).
	read    string
	token   string
	http    *http.Client
	retries int
	backoff time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken sets the bearer token of every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sets the HTTP client (default: one with a 60s timeout
// and a transport that keeps up to 64 idle connections per host).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithReadURL sets the base URL of Canon's read API when it is not the
// one pushes go to (canon serve with the producer and readapi roles in
// different processes). Writers ask it for their client's last id.
func WithReadURL(baseURL string) Option {
	return func(c *Client) { c.read = strings.TrimRight(baseURL, "/") }
}

// WithRetries sets how many times a push is retried after a network error,
// 429 or 503 (default 10), and the first backoff (default 50ms, doubling
// up to 5s, with jitter; a Retry-After from the server wins).
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) { c.retries, c.backoff = n, backoff }
}

// New returns a client of the Canon server at baseURL (e.g.
// "http://localhost:8080").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: 60 * time.Second, Transport: defaultTransport()},
		retries: 10, backoff: 50 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	if c.read == "" {
		c.read = c.base
	}
	return c
}

// LastID returns the id of the last mutation Canon decided for a client
// on a branch (empty: main) of a project, 0 when it has none: the read
// API's GET /v1/projects/{org}/{project}/clients/{client}. The token needs
// the read scope (write includes it). Network errors, 429 and 503 are
// retried as for a push.
func (c *Client) LastID(ctx context.Context, org, project, branch, client string) (uint64, error) {
	u := c.read + "/v1/projects/" + url.PathEscape(org) + "/" + url.PathEscape(project) + "/clients/" + url.PathEscape(client)
	if branch != "" {
		u += "?" + url.Values{"branch": {branch}}.Encode()
	}
	var res struct {
		LastMutationID *uint64 `json:"lastMutationID"`
	}
	err := c.retry(ctx, func() error { return c.do(ctx, http.MethodGet, u, nil, &res) })
	var apiErr *Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == wire.CodeBranchNotFound:
		return 0, nil // no mutation of anyone on the branch yet
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound:
		return 0, fmt.Errorf("canon: last id of client %s: %s has no read API (%w): pass client.WithReadURL with the readapi role's address",
			client, c.read, err)
	case err != nil:
		return 0, fmt.Errorf("canon: last id of client %s: %w", client, err)
	case res.LastMutationID == nil:
		return 0, fmt.Errorf("canon: last id of client %s: GET %s answered no lastMutationID: is it Canon's read API?", client, u)
	}
	return *res.LastMutationID, nil
}

// defaultTransport is the transport of the Clients made without
// WithHTTPClient: http.DefaultTransport's, but keeping up to 64 idle
// connections per host instead of 2, so that pushes from many goroutines
// to one Canon reuse their connections instead of opening (and leaving in
// TIME_WAIT) one for nearly every push. nil, for http.DefaultTransport,
// when that is not an *http.Transport.
var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = 64
	return t
})

// PushOptions tune one push.
type PushOptions struct {
	// Wait makes the push answer with each mutation's outcome, waiting up
	// to Timeout (0: the server's default, 10s).
	Wait    bool
	Timeout time.Duration
}

// Push sends one push and returns where its mutations were written (and
// their outcomes with Wait). Network errors, 429 and 503 are retried with
// the same body, so the order of the mutations is kept: a retry of a push
// that was partly written is not a problem, because mutations already
// written are duplicates and skipped. Other errors are returned as *Error.
func (c *Client) Push(ctx context.Context, org, project string, p Push, o PushOptions) (*Result, error) {
	body, err := wire.EncodePush(&p)
	if err != nil {
		return nil, fmt.Errorf("canon: encode push: %w", err)
	}
	u := c.base + "/v1/projects/" + url.PathEscape(org) + "/" + url.PathEscape(project) + "/push"
	if o.Wait {
		q := url.Values{"wait": {"applied"}}
		if o.Timeout > 0 {
			q.Set("timeout", o.Timeout.String())
		}
		u += "?" + q.Encode()
	}
	var res Result
	err = c.retry(ctx, func() error { return c.do(ctx, http.MethodPost, u, body, &res) })
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// retry runs do until it succeeds, fails for good, or the retries run out.
func (c *Client) retry(ctx context.Context, do func() error) error {
	backoff := c.backoff
	for attempt := 0; ; attempt++ {
		err := do()
		if err == nil {
			return nil
		}
		var apiErr *Error
		isAPI := errors.As(err, &apiErr)
		if (isAPI && !retryable(apiErr)) || attempt >= c.retries || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if isAPI && apiErr.RetryAfter > 0 {
			wait = time.Duration(apiErr.RetryAfter) * time.Second
		}
		backoff = min(2*backoff, 5*time.Second)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (c *Client) do(ctx context.Context, method, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read into a buffer of the announced size: io.ReadAll would grow one
	// from 512 bytes, copying and dropping each size on the way.
	var buf bytes.Buffer
	if resp.ContentLength > 0 && resp.ContentLength < 64<<20 {
		buf.Grow(int(resp.ContentLength) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return err
	}
	data := buf.Bytes()
	if resp.StatusCode >= 300 {
		var e wire.ErrorAnswer
		if json.Unmarshal(data, &e) != nil || e.Error == nil {
			e.Error = &Error{Code: "http", Message: strings.TrimSpace(string(data))}
		}
		e.Error.Status = resp.StatusCode
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.Error.RetryAfter = s
		}
		return e.Error
	}
	if r, ok := out.(*Result); ok {
		err = wire.DecodePushResponse(data, r)
	} else {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return fmt.Errorf("canon: decode the answer to %s %s: %w", method, u, err)
	}
	return nil
}
