package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// canonProc is `canon serve` run as a child process, so that its CPU time
// and memory are its own and can be read from /proc.
type canonProc struct {
	cmd  *exec.Cmd
	base string // http://host:port
	log  string
	done chan struct{}
	err  error
}

// startCanon runs bin with args plus --http on a free loopback port, its
// output appended to logPath, and waits until /readyz answers ready.
func startCanon(ctx context.Context, bin string, args []string, logPath string) (*canonProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the canon log: %w", err)
	}
	cmd := exec.Command(bin, append(args, "--http", addr)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w (build it with `make build` or pass the canon binary's path)", bin, err)
	}
	p := &canonProc{cmd: cmd, base: "http://" + addr, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if ready(rctx, p.base) {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("canon serve exited before it was ready (%w); its log %s ends with:\n%s", p.exitErr(), logPath, tail(logPath, 30))
		case <-rctx.Done():
			p.stop()
			return nil, fmt.Errorf("canon serve was not ready within 2 minutes; its log %s ends with:\n%s", logPath, tail(logPath, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ready(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"ready":true`)
}

func (p *canonProc) exitErr() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// exited returns the exit error if the process has ended.
func (p *canonProc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.exitErr()
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits for the drain, then kills.
func (p *canonProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// usage is what the process has used so far.
type usage struct {
	cpu       time.Duration // user + system
	rss       int64         // bytes
	allocated float64       // Go heap bytes allocated since start (go_memstats_alloc_bytes_total)
}

func (p *canonProc) usage(ctx context.Context) (usage, error) {
	st, err := p.stat()
	if err != nil {
		return usage{}, err
	}
	u := usage{cpu: time.Duration(st.CPUTime() * float64(time.Second)), rss: int64(st.ResidentMemory())}
	u.allocated, err = p.metric(ctx, "go_memstats_alloc_bytes_total")
	return u, err
}

// rss is the process's resident set now, in bytes.
func (p *canonProc) rss() (int64, error) {
	st, err := p.stat()
	if err != nil {
		return 0, err
	}
	return int64(st.ResidentMemory()), nil
}

func (p *canonProc) stat() (procfs.ProcStat, error) {
	proc, err := procfs.NewProc(p.cmd.Process.Pid)
	if err != nil {
		return procfs.ProcStat{}, fmt.Errorf("read /proc of canon: %w", err)
	}
	st, err := proc.Stat()
	if err != nil {
		return procfs.ProcStat{}, fmt.Errorf("read /proc of canon: %w", err)
	}
	return st, nil
}

// profile writes a CPU profile of d (canon runs with --pprof) to path.
func (p *canonProc) profile(ctx context.Context, d time.Duration, path string) error {
	return p.pprof(ctx, "profile", "CPU", d, path)
}

// allocProfile writes the Go heap allocations of the next d to path: a
// delta profile (alloc_space, alloc_objects) of what was allocated during
// d, the same span as the CPU profile.
func (p *canonProc) allocProfile(ctx context.Context, d time.Duration, path string) error {
	return p.pprof(ctx, "allocs", "allocation", d, path)
}

func (p *canonProc) pprof(ctx context.Context, name, what string, d time.Duration, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", p.base, name, max(1, int(d.Seconds()))), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("read canon's %s profile: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read canon's %s profile: %s", what, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("read canon's %s profile: %w", what, err)
	}
	return f.Close()
}

// txns are the sequencer's committed transactions so far.
type txns struct {
	n    int
	time time.Duration
}

func (p *canonProc) transactions(ctx context.Context) (txns, error) {
	n, err := p.metric(ctx, "canon_sequencer_transaction_seconds_count")
	if err != nil {
		return txns{}, err
	}
	sec, err := p.metric(ctx, "canon_sequencer_transaction_seconds_sum")
	if err != nil {
		return txns{}, err
	}
	return txns{n: int(n), time: time.Duration(sec * float64(time.Second))}, nil
}

// requests are canon's Kafka requests so far (canon_kafka_requests_total)
// by "client request"; empty for a build without the metric.
func (p *canonProc) requests(ctx context.Context) (map[string]float64, error) {
	return p.labeled(ctx, "canon_kafka_requests_total", "client", "request")
}

// requestBytes are the bytes of canon's Kafka requests and responses so
// far (canon_kafka_request_bytes_total) by "client request direction";
// empty for a build without the metric.
func (p *canonProc) requestBytes(ctx context.Context) (map[string]float64, error) {
	return p.labeled(ctx, "canon_kafka_request_bytes_total", "client", "request", "direction")
}

// labeled reads a counter with labels from canon's /metrics, summed by
// the values of the labels named (joined by spaces, in that order).
func (p *canonProc) labeled(ctx context.Context, metric string, names ...string) (map[string]float64, error) {
	name := metric + "{"
	out := map[string]float64{}
	err := p.scrape(ctx, func(line string) bool {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			return true
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return true
		}
		got := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = strings.Trim(v, `"`)
		}
		key := make([]string, len(names))
		for i, n := range names {
			key[i] = got[n]
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[strings.Join(key, " ")] += f
		}
		return true
	})
	return out, err
}

// metric reads one unlabelled counter or gauge from canon's /metrics.
func (p *canonProc) metric(ctx context.Context, name string) (float64, error) {
	var v float64
	found := false
	var perr error
	err := p.scrape(ctx, func(line string) bool {
		s, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			return true
		}
		v, perr = strconv.ParseFloat(strings.TrimSpace(s), 64)
		found = true
		return false
	})
	switch {
	case err != nil:
		return 0, err
	case perr != nil:
		return 0, perr
	case !found:
		return 0, fmt.Errorf("canon's /metrics has no %s", name)
	}
	return v, nil
}

// scrape reads canon's /metrics, a line at a time, until line returns
// false.
func (p *canonProc) scrape(ctx context.Context, line func(string) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("read canon's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !line(sc.Text()) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read canon's metrics: %w", err)
	}
	return nil
}

// saveMetrics writes canon's /metrics, as it is now, to path.
func (p *canonProc) saveMetrics(ctx context.Context, path string) error {
	var b bytes.Buffer
	if err := p.scrape(ctx, func(line string) bool {
		b.WriteString(line)
		b.WriteByte('\n')
		return true
	}); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
