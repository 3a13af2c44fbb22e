package canontest

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/testenv"
)

// Served is a `serve` child process of canon, or of a program built on
// package cli, on the real broker, with a keyset of its own.
type Served struct {
	Process *testenv.CanonProcess
	// Base is its HTTP address, http://127.0.0.1:PORT.
	Base string
	// KeysPath is the keyset file it verifies tokens with.
	KeysPath string
	Keys     *auth.Keyset
	// Brokers and Prefix are its --brokers and --topic-prefix, for the
	// commands a test runs against the same topics (replay, rebase).
	Brokers, Prefix string
}

var serveHTTP = regexp.MustCompile(`msg="canon serve started".* http=(\S+)`)

// Serve starts `bin serve` with the producer, sequencer and readapi roles
// on topics of its own (2 partitions) of k, and waits until it is ready.
// extra flags are appended; the process is stopped and its log checked at
// the end of the test.
func Serve(tb testing.TB, ctx context.Context, k *testenv.Kafka, bin, name string, extra ...string) *Served {
	tb.Helper()
	s := &Served{KeysPath: filepath.Join(tb.TempDir(), "keys.json"), Keys: auth.NewKeyset(),
		Brokers: strings.Join(k.Brokers, ","), Prefix: k.Topic(tb, name) + "."}
	if err := s.Keys.Generate("k1"); err != nil {
		tb.Fatal(err)
	}
	if err := s.Keys.Save(s.KeysPath); err != nil {
		tb.Fatal(err)
	}
	args := append([]string{"serve", "--brokers", s.Brokers, "--topic-prefix", s.Prefix,
		"--topic-partitions", "2", "--keys", s.KeysPath, "--http", "127.0.0.1:0", "--roles", "producer,sequencer,readapi",
		"--data", filepath.Join(testenv.ProcessDir(tb, name), "data")}, extra...)
	s.Process = testenv.NewProgramProcess(tb, bin, name, args...)
	s.Process.Start(ctx)
	tb.Cleanup(s.Process.CheckLog)
	m := serveHTTP.FindStringSubmatch(s.Process.CurrentLog())
	if m == nil {
		tb.Fatalf("%s did not log its HTTP address", name)
	}
	s.Base = "http://" + m[1]
	Wait(tb, ctx, name+" ready", func() (bool, error) { return s.Process.Ready(), nil })
	return s
}

// Token issues a token of the process's keyset, valid for an hour.
func (s *Served) Token(tb testing.TB, c auth.Claims) string {
	tb.Helper()
	tok, err := s.Keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// Pusher pushes the mutations of one client of a project, one at a time,
// and waits for each one's outcome (?wait=applied).
type Pusher struct {
	c                             *client.Client
	org, project, group, clientID string
	// Last is the id of the last mutation pushed.
	Last uint64
}

// Pusher pushes as clientID of group to org/project with token.
func (s *Served) Pusher(token, org, project, group, clientID string) *Pusher {
	return &Pusher{c: client.New(s.Base, client.WithToken(token)), org: org, project: project, group: group, clientID: clientID}
}

// Push pushes the client's next mutation and returns its outcome.
func (p *Pusher) Push(tb testing.TB, ctx context.Context, name string, args any) client.Outcome {
	tb.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	p.Last++
	res, err := p.c.Push(ctx, p.org, p.project, client.Push{ClientGroup: p.group, Mutations: []client.Mutation{
		{Client: p.clientID, ID: p.Last, Name: name, Args: raw}}}, client.PushOptions{Wait: true})
	if err != nil {
		tb.Fatalf("push %s: %v", name, err)
	}
	if len(res.Outcomes) != 1 {
		tb.Fatalf("push %s: %d outcomes, want 1", name, len(res.Outcomes))
	}
	return res.Outcomes[0]
}

// Applied pushes the client's next mutation and fails the test unless it
// is applied.
func (p *Pusher) Applied(tb testing.TB, ctx context.Context, name string, args any) {
	tb.Helper()
	if o := p.Push(tb, ctx, name, args); o.Status != client.Applied {
		tb.Fatalf("push %s: outcome %+v, want applied", name, o)
	}
}

// GetJSON reads url with a bearer token and decodes its JSON answer into
// v, failing the test on any error or an answer other than 200 OK.
func GetJSON(tb testing.TB, ctx context.Context, url, token string, v any) {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
}
