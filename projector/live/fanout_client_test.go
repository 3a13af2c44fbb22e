package live

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The fan-out benchmarks read with websocket clients in a process of
// their own, as real subscribers would be: clients in the server's process
// would share its Go scheduler, whose run queues, full of writers, delay
// the network poller that wakes the readers, and the benchmark would time
// the clients' scheduling rather than the server. The client process is
// this test binary, started with fanoutClientEnv naming its config file.
const fanoutClientEnv = "CANON_FANOUT_CLIENT"

// fanoutClientConfig is what the client process is told.
type fanoutClientConfig struct {
	// URLs has one websocket URL per connection.
	URLs   []string    `json:"urls"`
	Header http.Header `json:"header"`
	// Hello: the server greets each connection first (Canon does, the raw
	// baseline does not).
	Hello bool `json:"hello"`
	// Versions: each connection reads until this version.
	Versions uint64 `json:"versions"`
	// Out is the file for the results: per connection in order, a count
	// and that many (version, receive time in Unix ns) pairs, big endian.
	Out string `json:"out"`
}

// clientProcess is a running client process.
type clientProcess struct {
	cmd  *exec.Cmd
	out  string
	errb bytes.Buffer
}

// startClients starts the client process and returns once every
// connection is open (and greeted).
func startClients(b *testing.B, cfg fanoutClientConfig) *clientProcess {
	b.Helper()
	dir := b.TempDir()
	cfg.Out = filepath.Join(dir, "results")
	raw, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	p := &clientProcess{out: cfg.Out}
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(), fanoutClientEnv+"="+cfgPath)
	p.cmd.Stderr = &p.errb
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = p.cmd.Wait()
		b.Fatalf("client process: %q %v\n%s", line, err, p.errb.String())
	}
	return p
}

// wait waits for the client process to read everything and returns, per
// connection, the versions read and when.
func (p *clientProcess) wait(b *testing.B) [][]received {
	b.Helper()
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("client process: %v\n%s", err, p.errb.String())
	}
	raw, err := os.ReadFile(p.out)
	if err != nil {
		b.Fatal(err)
	}
	var res [][]received
	for len(raw) > 0 {
		n := binary.BigEndian.Uint64(raw)
		raw = raw[8:]
		rs := make([]received, n)
		for i := range rs {
			rs[i] = received{version: binary.BigEndian.Uint64(raw), at: int64(binary.BigEndian.Uint64(raw[8:]))}
			raw = raw[16:]
		}
		res = append(res, rs)
	}
	return res
}

type received struct {
	version uint64
	at      int64 // Unix ns
}

// fanoutClientMain is the client process.
func fanoutClientMain(cfgPath string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fan-out client:", err)
		return 1
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return fail(err)
	}
	var cfg fanoutClientConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fail(err)
	}
	conns := make([]*websocket.Conn, len(cfg.URLs))
	for i, u := range cfg.URLs {
		ws, _, err := websocket.DefaultDialer.Dial(u, cfg.Header)
		if err != nil {
			return fail(fmt.Errorf("dial %s: %w", u, err))
		}
		defer ws.Close()
		if cfg.Hello {
			if _, _, err := ws.ReadMessage(); err != nil {
				return fail(fmt.Errorf("hello on %s: %w", u, err))
			}
		}
		conns[i] = ws
	}
	fmt.Println("ready")

	res := make([][]received, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, ws := range conns {
		wg.Go(func() {
			rs := make([]received, 0, cfg.Versions)
			buf := make([]byte, 0, 1024)
			for got := uint64(0); got < cfg.Versions; {
				_, r, err := ws.NextReader()
				if err != nil {
					errs[i] = err
					return
				}
				buf = buf[:0]
				for {
					if len(buf) == cap(buf) {
						buf = slices.Grow(buf, len(buf))
					}
					n, err := r.Read(buf[len(buf):cap(buf)])
					buf = buf[:len(buf)+n]
					if err == io.EOF {
						break
					}
					if err != nil {
						errs[i] = err
						return
					}
				}
				now := time.Now().UnixNano()
				v, err := versionOf(buf)
				if err != nil {
					errs[i] = err
					return
				}
				rs = append(rs, received{version: v, at: now})
				got = v
			}
			res[i] = rs
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fail(fmt.Errorf("connection %d: %w", i, err))
		}
	}
	var out []byte
	for _, rs := range res {
		out = binary.BigEndian.AppendUint64(out, uint64(len(rs)))
		for _, r := range rs {
			out = binary.BigEndian.AppendUint64(out, r.version)
			out = binary.BigEndian.AppendUint64(out, uint64(r.at))
		}
	}
	if err := os.WriteFile(cfg.Out, out, 0o600); err != nil {
		return fail(err)
	}
	return 0
}

// versionOf finds "version":N in a version message without decoding it.
func versionOf(b []byte) (uint64, error) {
	i := bytes.Index(b, []byte(`"version":`))
	if i < 0 {
		return 0, fmt.Errorf("not a version: %s", b)
	}
	b = b[i+len(`"version":`):]
	j := bytes.IndexByte(b, ',')
	if j < 0 {
		return 0, fmt.Errorf("not a version: %s", b)
	}
	return strconv.ParseUint(string(b[:j]), 10, 64)
}
