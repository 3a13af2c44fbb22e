package testenv

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

// Failure tests run Canon as a real process, to kill it with SIGKILL or
// stop it in the middle of its work. BuildCanon builds the binary once
// per test process; CanonProcess runs it.

// canonPackage is the import path of Canon's own command.
const canonPackage = "github.com/canon-sync/canon/cmd/canon"

var programs struct {
	mu    sync.Mutex
	dir   string
	built map[string]builtProgram
}

type builtProgram struct {
	path string
	err  error
}

// BuildCanon builds cmd/canon once per test process and returns the
// binary's path.
func BuildCanon(tb testing.TB) string {
	tb.Helper()
	return BuildProgram(tb, canonPackage)
}

// BuildProgram builds the main package pkg (an import path, such as a
// program under examples/ that is Canon with its own mutators) once per
// test process and returns the binary's path.
func BuildProgram(tb testing.TB, pkg string) string {
	tb.Helper()
	programs.mu.Lock()
	defer programs.mu.Unlock()
	b, ok := programs.built[pkg]
	if !ok {
		b = buildProgram(pkg)
		if programs.built == nil {
			programs.built = make(map[string]builtProgram)
		}
		programs.built[pkg] = b
	}
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

func buildProgram(pkg string) builtProgram {
	if programs.dir == "" {
		dir, err := os.MkdirTemp("", "canon-test-bin-")
		if err != nil {
			return builtProgram{err: err}
		}
		programs.dir = dir
	}
	path := filepath.Join(programs.dir, fmt.Sprintf("%s-%d", filepath.Base(pkg), len(programs.built)))
	out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput()
	if err != nil {
		return builtProgram{err: fmt.Errorf("go build %s: %w\n%s", pkg, err, out)}
	}
	return builtProgram{path: path}
}

func removeCanonBinary() {
	programs.mu.Lock()
	defer programs.mu.Unlock()
	if programs.dir != "" {
		_ = os.RemoveAll(programs.dir)
	}
}

// serveStarted is the line `canon serve` (or `canon dev`) logs once it
// serves HTTP.
var serveStarted = regexp.MustCompile(`msg="canon (?:serve|dev) started".* http=(\S+)`)

// CanonProcess is one `canon serve` process, restartable with the same
// arguments (and so the same data directory). Its output goes to a log
// file, whose tail the test prints when it fails; the process is killed
// when the test ends, and with the test process.
type CanonProcess struct {
	t       testing.TB
	name    string
	bin     string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	http    string
	logFrom int64 // size of the log when the current run started
}

// NewCanonProcess prepares `canon ARGS...`, which must be a `serve` with
// `--http 127.0.0.1:0` so that the process tells its address. Dir is a
// directory of the test's for the data and the log (kept after the test
// with CANON_TEST_KEEP=1).
func NewCanonProcess(t testing.TB, name string, args ...string) *CanonProcess {
	t.Helper()
	return NewProgramProcess(t, BuildCanon(t), name, args...)
}

// NewProgramProcess is NewCanonProcess for another build of Canon's
// command, bin (see BuildProgram).
func NewProgramProcess(t testing.TB, bin, name string, args ...string) *CanonProcess {
	t.Helper()
	p := &CanonProcess{t: t, name: name, bin: bin, args: args,
		logPath: filepath.Join(ProcessDir(t, name), name+".log")}
	t.Cleanup(func() {
		p.Signal(syscall.SIGCONT)
		p.Signal(syscall.SIGKILL)
		p.Wait(30 * time.Second)
		if t.Failed() {
			t.Logf("last lines of %s (%s):\n%s", p.name, p.logPath, tailFile(p.logPath, 80))
		}
	})
	return p
}

// ProcessDir is a directory for a process's data and log: the test's
// temporary one, or with CANON_TEST_KEEP=1 one kept after the test.
func ProcessDir(t testing.TB, name string) string {
	t.Helper()
	if os.Getenv(EnvKeep) != "1" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "canon-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s keeps its data and log in %s", name, dir)
	return dir
}

// Name is the process's name in the test's messages.
func (p *CanonProcess) Name() string { return p.name }

// Start runs the process and waits until it serves HTTP.
func (p *CanonProcess) Start(ctx context.Context) {
	p.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	st, _ := logf.Stat()
	fmt.Fprintf(logf, "=== test: starting %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr, p.http, p.logFrom = cmd, done, nil, "", st.Size()
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
		if m := serveStarted.FindStringSubmatch(p.CurrentLog()); m != nil {
			p.mu.Lock()
			p.http = m[1]
			p.mu.Unlock()
			return
		}
		select {
		case <-done:
			p.t.Fatalf("%s exited at start: %v\n%s", p.name, p.ExitError(), p.CurrentLog())
		case <-ctx.Done():
			p.t.Fatalf("%s did not start serving HTTP\n%s", p.name, p.CurrentLog())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CurrentLog is the log of the current run.
func (p *CanonProcess) CurrentLog() string {
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

// Exited reports whether the process is not running.
func (p *CanonProcess) Exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// ExitError is how the last run ended.
func (p *CanonProcess) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Signal sends sig to the running process.
func (p *CanonProcess) Signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && !p.Exited() {
		_ = cmd.Process.Signal(sig)
	}
}

// Wait waits up to d for the process to exit and reports whether it did.
func (p *CanonProcess) Wait(d time.Duration) bool {
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

// Stop ends the process with SIGTERM and expects a clean exit.
func (p *CanonProcess) Stop() {
	p.t.Helper()
	p.Signal(syscall.SIGTERM)
	if !p.Wait(60 * time.Second) {
		p.t.Fatalf("%s did not stop within 60s of SIGTERM", p.name)
	}
	if err := p.ExitError(); err != nil {
		p.t.Fatalf("%s exited with %v after SIGTERM", p.name, err)
	}
}

// Kill ends the process with SIGKILL, as a crash would.
func (p *CanonProcess) Kill() {
	p.t.Helper()
	p.Signal(syscall.SIGKILL)
	if !p.Wait(30 * time.Second) {
		p.t.Fatalf("%s survived SIGKILL", p.name)
	}
}

// Get requests path from the process's HTTP server.
func (p *CanonProcess) Get(path string) (int, []byte, error) {
	p.mu.Lock()
	addr := p.http
	p.mu.Unlock()
	if addr == "" || p.Exited() {
		return 0, nil, fmt.Errorf("%s is not running", p.name)
	}
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Ready reports whether /readyz answers 200.
func (p *CanonProcess) Ready() bool {
	code, _, err := p.Get("/readyz")
	return err == nil && code == http.StatusOK
}

// Metric sums the samples of a metric family from /metrics; an
// unreachable process or a missing family is an error.
func (p *CanonProcess) Metric(name string) (float64, error) {
	code, body, err := p.Get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics of %s: status %d", p.name, code)
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
			return 0, fmt.Errorf("metric %s: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s has no metric %s", p.name, name)
	}
	return sum, nil
}

// CheckLog fails the test on a panic, a data race or a fatal error in
// the process's log.
func (p *CanonProcess) CheckLog() {
	p.t.Helper()
	b, _ := os.ReadFile(p.logPath)
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		if bytes.Contains(b, []byte(bad)) {
			p.t.Errorf("%s logged %q", p.name, bad)
		}
	}
}
