package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/gorilla/websocket"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/chserver"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

type devProc struct {
	token   string
	cmd     *exec.Cmd
	out     syncBuffer
	drained chan struct{} // closed when all output was read
	http    string
	brokers string
	// history is the local ClickHouse's address, empty when canon dev
	// started none.
	history string
	exited  chan error
}

// syncBuffer collects output written by one goroutine and read by another.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	tokenLine = regexp.MustCompile(`dev token\s+(\S+)`)
	uiLine    = regexp.MustCompile(`web UI\s+(http://\S+)/ui/#token=(\S+)`)
	httpLine  = regexp.MustCompile(`health\s+(http://\S+)/healthz`)
	kafkaLine = regexp.MustCompile(`kafka\s+(\S+) \(embedded`)
	chLine    = regexp.MustCompile(`history\s+ClickHouse (\S+) \(local`)
	rolesLine = regexp.MustCompile(`^\s+roles\s`)
)

// startDev runs `canon dev` and waits until its banner names its addresses.
// The embedded broker listens on a free port, unless extra flags are
// given: they replace --kafka-listen 127.0.0.1:0.
func startDev(t *testing.T, ctx context.Context, bin, data string, extra ...string) *devProc {
	t.Helper()
	if len(extra) == 0 {
		extra = []string{"--kafka-listen", "127.0.0.1:0"}
	}
	cmd := exec.Command(bin, append([]string{"dev", "--data", data, "--http", "127.0.0.1:0", "--clickhouse-port", "0"}, extra...)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProc{cmd: cmd, drained: make(chan struct{}), exited: make(chan error, 1)}
	found := make(chan struct{})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { p.exited <- cmd.Wait(); pw.Close() }()
	var httpURL, brokers, token, history string
	go func() {
		defer close(p.drained)
		done := false
		for l := range lines {
			p.out.WriteString(l + "\n")
			if m := httpLine.FindStringSubmatch(l); m != nil {
				httpURL = m[1]
			}
			if m := kafkaLine.FindStringSubmatch(l); m != nil {
				brokers = m[1]
			}
			if m := tokenLine.FindStringSubmatch(l); m != nil {
				token = m[1]
			}
			if m := chLine.FindStringSubmatch(l); m != nil {
				history = m[1]
			}
			// The roles line comes after the history line.
			if !done && httpURL != "" && brokers != "" && token != "" && rolesLine.MatchString(l) {
				done = true
				close(found)
			}
		}
	}()
	select {
	case <-found:
		p.http, p.brokers, p.token, p.history = httpURL, brokers, token, history // published by close(found)
	case err := <-p.exited:
		t.Fatalf("canon dev exited early: %v\n%s", err, p.out.String())
	case <-ctx.Done():
		cmd.Process.Kill()
		t.Fatalf("canon dev did not print its addresses:\n%s", p.out.String())
	}
	return p
}

// stop sends Ctrl-C and expects a clean exit.
func (p *devProc) stop(t *testing.T) string {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("canon dev exited with %v after Ctrl-C:\n%s", err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("canon dev did not stop within 30s of Ctrl-C:\n%s", p.out.String())
	}
	<-p.drained
	return p.out.String()
}

func waitReady(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	canontest.Wait(t, ctx, base+"/readyz answering ready", func() (bool, error) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, canontest.Pending("%v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"ready":true`) {
			return true, nil
		}
		return false, canontest.Pending("%d %s", resp.StatusCode, body)
	})
}

func TestDevStartsStopsAndReusesData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildCanon(t)
	data := t.TempDir()

	p := startDev(t, ctx, bin, data)
	waitReady(t, ctx, p.http)
	// The web UI's address carries the dev token.
	if m := uiLine.FindStringSubmatch(p.out.String()); m == nil || m[1] != p.http || m[2] != p.token {
		t.Fatalf("canon dev did not print the web UI's address with the dev token:\n%s", p.out.String())
	}
	for _, path := range []string{"/healthz", "/metrics", "/ui/"} {
		resp, err := http.Get(p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if path == "/metrics" && !strings.Contains(string(body), "go_goroutines") {
			t.Fatalf("/metrics has no Go runtime metrics")
		}
		if path == "/ui/" && !strings.Contains(string(body), `src="app.js"`) {
			t.Fatalf("/ui/ is not the web UI's page: %.200s", body)
		}
	}
	if out, err := exec.Command(bin, "health", "--url", p.http+"/readyz").CombinedOutput(); err != nil {
		t.Fatalf("canon health: %v: %s", err, out)
	}
	// A browser app of any local port may use the APIs (CORS); another
	// origin may not.
	for origin, want := range map[string]int{"http://localhost:5173": http.StatusNoContent, "http://127.0.0.1:3000": http.StatusNoContent,
		"https://evil.example": http.StatusForbidden} {
		req, _ := http.NewRequest(http.MethodOptions, p.http+"/v1/projects/dev/demo/push", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		allowed := resp.Header.Get("Access-Control-Allow-Origin")
		if resp.StatusCode != want || (want == http.StatusNoContent) != (allowed == origin) {
			t.Errorf("preflight from %s: %d, Access-Control-Allow-Origin %q", origin, resp.StatusCode, allowed)
		}
	}
	wsURL := "ws" + strings.TrimPrefix(p.http, "http") + "/v1/projects/dev/demo/ws?token=" + p.token
	if c, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL, http.Header{"Origin": {"https://evil.example"}}); err == nil {
		c.Close()
		t.Errorf("a websocket from https://evil.example was accepted")
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a websocket from https://evil.example: %v", err)
	}
	c, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, http.Header{"Origin": {"http://localhost:5173"}})
	if err != nil {
		t.Fatalf("a websocket from http://localhost:5173: %v", err)
	}
	c.Close()
	// A push with the dev token comes out of the sequencer as version 1.
	body := `{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"collection":"notes","id":"n1","data":{"text":"hello"}}}]}`
	req, _ := http.NewRequest(http.MethodPost, p.http+"/v1/projects/dev/demo/push", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("push with the dev token: %d %s", resp.StatusCode, answer)
	}
	versions, err := kgo.NewClient(kgo.SeedBrokers(p.brokers), kgo.ConsumeTopics("canon.versions"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	var version *schemas.Version
	for version == nil {
		fs := versions.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no version for the pushed mutation:\n%s", p.out.String())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, r.Value, schemas.DefaultLimits()); err == nil {
				version = v
			}
		})
	}
	versions.Close()
	if version.Org != "dev" || version.Project != "demo" || version.Version != 1 || version.Mutations[0].Status != schemas.StatusApplied ||
		version.Mutations[0].Principal != "dev" {
		t.Fatalf("version %+v", version)
	}

	// The history projector writes the mutation into the local ClickHouse.
	withClickHouse := chserver.FindBinary() != nil
	if withClickHouse {
		if p.history == "" {
			t.Fatalf("clickhouse-server is installed but canon dev started no local ClickHouse:\n%s", p.out.String())
		}
		waitHistory(t, ctx, p.history, 1)
	} else if p.history != "" || !strings.Contains(p.out.String(), chserver.InstallCommand) {
		t.Fatalf("without clickhouse-server canon dev should run without history and print %q:\n%s", chserver.InstallCommand, p.out.String())
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(p.brokers))
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: "canon.rejected", Key: []byte("acme/roadmap"), Value: []byte("survives")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	first := p.stop(t)
	if strings.Count(first, "created topic") != 3 {
		t.Fatalf("first start should create the 3 topics:\n%s", first)
	}

	p = startDev(t, ctx, bin, data)
	waitReady(t, ctx, p.http)
	cons, err := kgo.NewClient(kgo.SeedBrokers(p.brokers), kgo.ConsumeTopics("canon.rejected"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	fs := cons.PollRecords(ctx, 10)
	cons.Close()
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "survives" {
		t.Fatalf("after restart read %d records, want the one written before", len(recs))
	}
	if withClickHouse {
		// The history made before the restart is still there.
		waitHistory(t, ctx, p.history, 1)
	}
	history := p.history
	second := p.stop(t)
	if history != "" {
		if err := chserver.Ping(ctx, history); err == nil {
			t.Fatalf("the local ClickHouse at %s still answers after canon dev stopped", history)
		}
	}
	if out, err := exec.Command(bin, "health", "--url", p.http+"/readyz", "--timeout", "1s").CombinedOutput(); err == nil {
		t.Fatalf("canon health succeeded against a stopped canon: %s", out)
	}
	if strings.Contains(second, "created topic") {
		t.Fatalf("second start created topics again:\n%s", second)
	}
}

// waitHistory waits until the canon database at addr holds want mutations
// of dev/demo.
func waitHistory(t *testing.T, ctx context.Context, addr string, want uint64) {
	t.Helper()
	conn, err := clickhouse.Open(chserver.Options(addr, "default"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	canontest.Wait(t, ctx, fmt.Sprintf("%d mutations of dev/demo in ClickHouse at %s", want, addr), func() (bool, error) {
		var n uint64
		err := conn.QueryRow(ctx, "SELECT count() FROM canon.mutations FINAL WHERE org = 'dev' AND project = 'demo'").Scan(&n)
		if err == nil && n == want {
			return true, nil
		}
		return false, canontest.Pending("%d (last error: %v)", n, err)
	})
}

func TestUnknownRoleIsAUsageError(t *testing.T) {
	bin := testenv.BuildCanon(t)
	out, err := exec.Command(bin, "serve", "--brokers", "127.0.0.1:1", "--roles", "nope").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `unknown role "nope"`) {
		t.Fatalf("got %v, %s; want exit 2 naming the role", err, out)
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	bin := testenv.BuildCanon(t)
	cmd := exec.Command(bin, "serve", "--roles", "x")
	cmd.Env = append(os.Environ(), "CANON_LOG_FORMAT=xml")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), `--log-format "xml"`) {
		t.Fatalf("CANON_LOG_FORMAT was not applied: %s", out)
	}
}
