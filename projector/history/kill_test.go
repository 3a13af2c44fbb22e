package history

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildCanon builds the canon binary into the test's temp dir.
func buildCanon(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "canon")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/canon-sync/canon/cmd/canon").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/canon: %v\n%s", err, out)
	}
	return bin
}

// projProc is a `canon serve --roles projector` process, restartable;
// its output goes to a log whose tail is printed when the test fails.
type projProc struct {
	t       *testing.T
	args    []string
	bin     string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	logFrom int64
	http    string
}

var serveStarted = regexp.MustCompile(`msg="canon serve started".* http=(\S+)`)

func newProjProc(t *testing.T, f *fixture, extra ...string) *projProc {
	dir := t.TempDir()
	p := &projProc{t: t, bin: buildCanon(t), logPath: filepath.Join(dir, "projector.log")}
	p.args = append([]string{"serve", "--roles", "projector",
		"--brokers", strings.Join(f.brokers, ","),
		"--topic-prefix", f.prefix,
		"--topic-partitions", strconv.Itoa(int(f.info.Partitions)),
		"--data", filepath.Join(dir, "data"),
		"--http", "127.0.0.1:0",
		"--clickhouse", f.ch.Addr,
		"--clickhouse-database", f.db,
		"--projector-session-timeout", "2s",
	}, extra...)
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		p.wait(30 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("last lines of the projector log:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	return p
}

func (p *projProc) start(ctx context.Context) {
	p.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	st, _ := logf.Stat()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr, p.logFrom, p.http = cmd, done, nil, st.Size(), ""
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	for {
		if m := serveStarted.FindStringSubmatch(p.currentLog()); m != nil {
			p.mu.Lock()
			p.http = m[1]
			p.mu.Unlock()
			return
		}
		select {
		case <-done:
			p.t.Fatalf("projector exited at start: %v\n%s", p.exitError(), p.currentLog())
		case <-ctx.Done():
			p.t.Fatalf("projector did not start\n%s", p.currentLog())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *projProc) currentLog() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	p.mu.Lock()
	from := p.logFrom
	p.mu.Unlock()
	b, _ := io.ReadAll(io.NewSectionReader(f, from, 1<<40))
	return string(b)
}

func (p *projProc) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *projProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(sig)
	}
}

func (p *projProc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// metric sums a metric family of the process's /metrics.
func (p *projProc) metric(name string) (float64, error) {
	p.mu.Lock()
	addr := p.http
	p.mu.Unlock()
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if base, _, _ := strings.Cut(series, "{"); !ok || base != name {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, err
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no metric %s", name)
	}
	return sum, nil
}

// The projector is killed with SIGKILL several times while it inserts
// and commits, and restarted each time; in the end the tables,
// deduplicated, hold exactly what canon.versions holds.
func TestProjectorSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds canon and runs it against the real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 4)
	ms := workload(t, 8, 3, 60, 7)
	f.produce(t, ctx, ms)
	f.runSequencer(t, ctx)
	content := f.readVersions(t, ctx, len(ms))
	t.Logf("%d versions and %d chunks (%d bytes) in %s", len(content.versions), content.chunks, sum(content.chunkBytes), f.info.Names.Versions)

	p := newProjProc(t, f, "--projector-batch-rows", "300", "--projector-batch-interval", "50ms")
	conn := f.ch.Conn(t, "default")
	physical := func() uint64 {
		var n uint64
		// The table may not exist yet: then 0.
		_ = conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = ? AND table = 'mutations' AND active", f.db).Scan(&n)
		if n == 0 {
			return 0
		}
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+f.db+".mutations").Scan(&n)
		return n
	}
	const kills = 5
	total := uint64(len(ms))
	midway := 0
	for k := 1; k <= kills; k++ {
		p.start(ctx)
		// Kill as soon as this run inserted rows beyond the k-th step:
		// batches are being inserted and committed right then.
		before := physical()
		target := max(before+1, total*uint64(k)/(kills+2))
		for physical() < target {
			if ctx.Err() != nil {
				t.Fatalf("no progress to %d mutation rows before kill %d", target, k)
			}
			time.Sleep(5 * time.Millisecond)
		}
		p.signal(syscall.SIGKILL)
		if !p.wait(30 * time.Second) {
			t.Fatal("projector survived SIGKILL")
		}
		var final uint64
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+f.db+".mutations FINAL").Scan(&final)
		if final < total {
			midway++
		}
		t.Logf("kill %d: %d mutation rows (%d distinct of %d)", k, physical(), final, total)
	}
	if midway < 3 {
		t.Fatalf("only %d of %d kills happened before the projection was complete: make the workload larger", midway, kills)
	}

	p.start(ctx)
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".versions FINAL", total)
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".mutations FINAL", total)
	// Caught up: the lag gauge falls to 0 once every offset is committed.
	for {
		lag, err := p.metric("canon_projector_lag_records")
		if err == nil && lag == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("lag never reached 0 (last %v, %v)", lag, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.signal(syscall.SIGTERM)
	if !p.wait(60 * time.Second) {
		t.Fatal("projector did not stop after SIGTERM")
	}
	if err := p.exitError(); err != nil {
		t.Fatalf("projector exited with %v after SIGTERM", err)
	}
	t.Logf("%d mutation rows inserted for %d mutations", physical(), total)
	checkTables(t, ctx, f, content)
	b, _ := os.ReadFile(p.logPath)
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("the projector logged %q", bad)
		}
	}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}
