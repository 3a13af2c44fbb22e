// Package chserver runs a local ClickHouse server from Debian's
// clickhouse-server package (or any `clickhouse` binary on PATH) with a
// generated config: everything under one directory, listening on
// 127.0.0.1 only, the default user without a password from loopback;
// optionally a secure native port (TLS) and users with a password.
//
// `canon dev` uses it for the history tables of a development machine and
// internal/testenv for the tests. The config loads on 18.16 (what Debian
// ships) and on current releases.
package chserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// InstallCommand installs Debian's ClickHouse server and client; it is
// what errors and `canon dev` tell a user to run.
const InstallCommand = "sudo apt-get update && sudo apt-get install -y clickhouse-server clickhouse-client"

// ErrNotInstalled means no ClickHouse server binary was found.
var ErrNotInstalled = errors.New("clickhouse-server not found in /usr/sbin or on PATH")

// FindBinary returns the command that runs a ClickHouse server, or nil
// when none is installed.
func FindBinary() []string {
	if _, err := os.Stat("/usr/sbin/clickhouse-server"); err == nil {
		return []string{"/usr/sbin/clickhouse-server"}
	}
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return []string{p}
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return []string{p, "server"}
	}
	return nil
}

// Install installs Debian's clickhouse-server with apt-get, writing
// apt's output to log. It must run as root.
func Install(ctx context.Context, log io.Writer) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("installing clickhouse-server needs root: run `%s`", InstallCommand)
	}
	for _, args := range [][]string{
		{"apt-get", "update"},
		{"apt-get", "install", "-y", "clickhouse-server", "clickhouse-client"},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout = log
		cmd.Stderr = log
		fmt.Fprintf(log, "=== chserver: %s\n", strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("install clickhouse-server (%s): %w", strings.Join(args, " "), err)
		}
	}
	if FindBinary() == nil {
		return errors.New("apt-get installed clickhouse-server but no server binary was found")
	}
	return nil
}

// Config says where and how a server runs.
type Config struct {
	// Dir holds the config, the data and the logs; created if missing.
	// A server started again on the same Dir finds its tables.
	Dir string
	// TCPPort is the native protocol port on 127.0.0.1 (0: a free one).
	TCPPort int
	// HTTPPort is the HTTP port on 127.0.0.1 (0: a free one).
	HTTPPort int
	// Binary is the command that runs the server (nil: FindBinary).
	Binary []string
	// StartTimeout bounds the wait for the first ping (default 2 minutes).
	StartTimeout time.Duration
	// Secure, when set, adds the secure native port (TLS).
	Secure *Secure
	// Users are users with a password, besides the default user (who
	// has none, from loopback only).
	Users []User
}

// Secure is the TLS of the secure native port (tcp_port_secure).
type Secure struct {
	// Port is on 127.0.0.1 (0: a free one).
	Port int
	// CertFile and KeyFile are the server's certificate and key, PEM.
	CertFile, KeyFile string
	// CAFile, when set, is the PEM file of the CAs whose certificate a
	// client must present (verificationMode strict); else clients need
	// none.
	CAFile string
}

// User is a user with a password, from loopback only.
type User struct {
	Name, Password string
}

// Server is a running ClickHouse server, a child process of this one. It
// gets SIGKILL when this process dies, so nothing is left running.
type Server struct {
	// Addr is host:port of the native protocol, HTTPAddr that of HTTP,
	// SecureAddr that of the secure native port (Config.Secure).
	Addr, HTTPAddr, SecureAddr string
	// LogPath receives the server's console output; ErrLogPath its
	// error log.
	LogPath, ErrLogPath string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Start writes the config under cfg.Dir, starts the server and waits until
// it answers a native ping.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	argv := cfg.Binary
	if argv == nil {
		if argv = FindBinary(); argv == nil {
			return nil, fmt.Errorf("%w: install it with `%s`", ErrNotInstalled, InstallCommand)
		}
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"data", "tmp", "user_files", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("create ClickHouse dir: %w", err)
		}
	}
	for _, u := range cfg.Users {
		if u.Name == "" || u.Name == "default" || strings.Trim(u.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return nil, fmt.Errorf("ClickHouse user name %q: want letters, digits and _, not default", u.Name)
		}
	}
	want := []int{cfg.TCPPort, cfg.HTTPPort}
	if cfg.Secure != nil {
		want = append(want, cfg.Secure.Port)
	}
	ps, err := ports(want...)
	if err != nil {
		return nil, err
	}
	tcp, httpPort := ps[0], ps[1]
	conf := ServerConfig(dir, tcp, httpPort)
	if cfg.Secure != nil {
		conf = strings.Replace(conf, "</yandex>\n", secureConfig(ps[2], cfg.Secure)+"</yandex>\n", 1)
	}
	configPath := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(configPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(usersConfig(cfg.Users)), 0o600); err != nil {
		return nil, err
	}
	s := &Server{
		Addr:       hostPort(tcp),
		HTTPAddr:   hostPort(httpPort),
		LogPath:    filepath.Join(dir, "clickhouse.log"),
		ErrLogPath: filepath.Join(dir, "clickhouse-server.err.log"),
		done:       make(chan struct{}),
	}
	if cfg.Secure != nil {
		s.SecureAddr = hostPort(ps[2])
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse log: %w", err)
	}
	fmt.Fprintf(logf, "\n=== chserver: starting at %s: %q\n", time.Now().Format(time.RFC3339), argv)
	cmd := exec.Command(argv[0], append(argv[1:], "--config-file="+configPath)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	s.cmd = cmd
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.waitReady(wctx); err != nil {
		s.Stop(10 * time.Second)
		return nil, err
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	var last error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("clickhouse-server exited before answering (%w); log %s:\n%s", s.exitErr(), s.LogPath, s.Tail(40))
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = Ping(pctx, s.Addr)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clickhouse-server at %s did not answer: %w (last error: %w); log %s:\n%s", s.Addr, ctx.Err(), last, s.LogPath, s.Tail(40))
		case <-s.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return errors.New("exit status 0")
	}
	return s.err
}

// Done is closed when the server process has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop asks the server to end (SIGTERM) and kills it if it has not within
// grace. The data under Dir is kept.
func (s *Server) Stop(grace time.Duration) {
	if !s.signal(syscall.SIGTERM, grace) {
		s.signal(syscall.SIGKILL, 30*time.Second)
	}
}

func (s *Server) signal(sig syscall.Signal, wait time.Duration) bool {
	select {
	case <-s.done:
		return true
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, sig)
	select {
	case <-s.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// Tail returns the last n lines of the console log and, when it is not
// empty, of the error log.
func (s *Server) Tail(n int) string {
	out := TailFile(s.LogPath, n)
	if st, err := os.Stat(s.ErrLogPath); err == nil && st.Size() > 0 {
		out += "\n--- " + s.ErrLogPath + " ---\n" + TailFile(s.ErrLogPath, n)
	}
	return out
}

// Options are the client options for a server of this package (user
// default, no password). The driver's defaults work against 18.16
// (revision 54412: the client downgrades its protocol in the handshake).
func Options(addr, database string) *clickhouse.Options {
	return &clickhouse.Options{
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
		ReadTimeout: time.Minute,
	}
}

// Ping opens a connection to addr and pings the server.
func Ping(ctx context.Context, addr string) error {
	conn, err := clickhouse.Open(Options(addr, "default"))
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Ping(ctx)
}

// Events reads the named counters of the server's system.events (those
// it has counted so far; a counter still at zero is absent).
func Events(ctx context.Context, conn clickhouse.Conn, names ...string) (map[string]uint64, error) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + strings.ReplaceAll(n, "'", "") + "'"
	}
	rows, err := conn.Query(ctx, "SELECT event, value FROM system.events WHERE event IN ("+strings.Join(quoted, ", ")+")")
	if err != nil {
		return nil, fmt.Errorf("read system.events: %w", err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var name string
		var v uint64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, fmt.Errorf("read system.events: %w", err)
		}
		out[name] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read system.events: %w", err)
	}
	return out, nil
}

// ports returns the requested ports, replacing 0 by free ones.
func ports(want ...int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, len(want))
	for i, p := range want {
		if p != 0 {
			out[i] = p
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l) // held until all are picked: never the same port twice
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// PortFree reports whether port can be listened on at 127.0.0.1 now.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// TailFile returns the last n lines of the file at path (of its last
// 256 KiB), or a note saying why it cannot.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const window = 256 << 10
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-window, 0)
	buf, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(buf, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// ServerConfig is a server config that keeps everything under dir and
// listens on 127.0.0.1 only. It must load on 18.16 and on current
// releases: current ones still accept the <yandex> root element, and
// settings 18.16 does not know (max_server_memory_usage) are ignored there.
func ServerConfig(dir string, tcpPort, httpPort int) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>%[1]s/clickhouse-server.log</log>
        <errorlog>%[1]s/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
        <console>1</console>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <http_port>%[3]d</http_port>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>%[1]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <max_concurrent_queries>100</max_concurrent_queries>
    <max_server_memory_usage>4294967296</max_server_memory_usage>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mlock_executable>false</mlock_executable>
    <!-- The data holds every mutation's args: the user's only (the
         server's own default umask, 027, leaves it to the group). -->
    <umask>077</umask>
</yandex>
`, dir, tcpPort, httpPort)
}

// secureConfig is the secure native port and its TLS (Poco's
// <openSSL><server>, which 18.16 and current releases read alike).
func secureConfig(port int, sec *Secure) string {
	verify, ca := "none", ""
	if sec.CAFile != "" {
		verify, ca = "strict", "\n            <caConfig>"+xmlText(sec.CAFile)+"</caConfig>"
	}
	return fmt.Sprintf(`    <tcp_port_secure>%d</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>%s</certificateFile>
            <privateKeyFile>%s</privateKeyFile>%s
            <verificationMode>%s</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <cacheSessions>true</cacheSessions>
            <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
            <preferServerCiphers>true</preferServerCiphers>
        </server>
    </openSSL>
`, port, xmlText(sec.CertFile), xmlText(sec.KeyFile), ca, verify)
}

// usersConfig is UsersConfig with users added, each with the SHA-256 of
// its password.
func usersConfig(users []User) string {
	var b strings.Builder
	for _, u := range users {
		sum := sha256.Sum256([]byte(u.Password))
		fmt.Fprintf(&b, `        <%s>
            <password_sha256_hex>%s</password_sha256_hex>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </%[1]s>
`, u.Name, hex.EncodeToString(sum[:]))
	}
	return strings.Replace(UsersConfig, "    </users>\n", b.String()+"    </users>\n", 1)
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// UsersConfig lets the default user in without a password, from loopback
// only.
const UsersConfig = `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2147483648</max_memory_usage>
            <max_threads>2</max_threads>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`
