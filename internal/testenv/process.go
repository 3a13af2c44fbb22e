package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/canon-sync/canon/internal/chserver"
)

// process is a server started as a child process of the test run. Its
// output goes to a log file so that a failing test can print the tail.
//
// The child gets SIGKILL when the process that started it dies
// (Pdeathsig), so an interrupted or crashed test run leaves nothing behind.
type process struct {
	name    string
	argv    []string
	env     []string
	dir     string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit error, valid after done is closed
}

func newProcess(name, dir, logPath string, env []string, argv ...string) *process {
	return &process{name: name, argv: argv, env: env, dir: dir, logPath: logPath}
}

// start launches the process; its log file is appended to, so restarts
// keep the earlier output.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("start %s: already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.name, err)
	}
	fmt.Fprintf(logf, "\n=== testenv: starting %s at %s: %q\n", p.name, time.Now().Format(time.RFC3339), p.argv)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd = cmd
	done := make(chan struct{})
	p.done = done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited reports whether the process has ended, with its exit error.
func (p *process) exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true, errors.New("never started")
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// signal sends sig to the process group and waits up to wait for the
// process to end. It returns false if the process is still running.
func (p *process) signal(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if wait <= 0 {
		return false
	}
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// stop asks the process to end (SIGTERM) and kills it if it has not
// within grace.
func (p *process) stop(grace time.Duration) {
	if !p.signal(syscall.SIGTERM, grace) {
		p.signal(syscall.SIGKILL, 30*time.Second)
	}
}

// kill ends the process with SIGKILL, as a crash would.
func (p *process) kill() { p.signal(syscall.SIGKILL, 30*time.Second) }

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string { return tailFile(p.logPath, n) }

func tailFile(path string, n int) string { return chserver.TailFile(path, n) }

// waitFor polls cond until it returns nil, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, what string, cond func(context.Context) error) error {
	var last error
	for {
		if ended, err := p.exited(); ended {
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited before %s (%w); log %s:\n%s", p.name, what, err, p.logPath, p.tail(40))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = cond(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w (last error: %w); log %s:\n%s", p.name, what, ctx.Err(), last, p.logPath, p.tail(40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct TCP ports that are free on 127.0.0.1 right
// now. The listeners are held until all ports are picked so that the same
// port is not returned twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// lockFile takes an exclusive advisory lock on path, creating it, so that
// parallel test processes do not download or unpack the same thing twice.
func lockFile(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
