package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/chserver"
	"github.com/canon-sync/canon/internal/testenv"
)

// TestClickHouseTLSAndPassword runs `canon migrate` against a real
// ClickHouse server's secure native port, as user canon with a password:
// with the server's CA and the right password it creates the history
// tables and a second run finds them applied; the same flags give the
// projector a connection that writes and reads. A wrong password, an
// untrusted server certificate, the plain port under TLS and no client
// certificate where the server requires one fail with an error that names
// the flag to fix; with --clickhouse-tls-cert and --clickhouse-tls-key
// that server lets canon in.
func TestClickHouseTLSAndPassword(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("starts a ClickHouse server")
	}
	if chserver.FindBinary() == nil && !testenv.InCI() {
		t.Skipf("clickhouse-server is not installed (%s)", chserver.InstallCommand)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ca, err := testenv.NewCA(dir, "clickhouse-test")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Issue("clickhouse")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testenv.NewCA(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	const password = "canon-secret"
	srv, err := chserver.Start(ctx, chserver.Config{
		Dir:    filepath.Join(dir, "server"),
		Secure: &chserver.Secure{CertFile: certFile, KeyFile: keyFile},
		Users:  []chserver.User{{Name: "canon", Password: password}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(10 * time.Second) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the ClickHouse log:\n%s", srv.Tail(60))
		}
	})
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	right, wrong := file("password", password+"\n"), file("wrong", "not-"+password+"\n")
	const db = "canon_tls"
	flags := func(addr, caFile, pwFile string) []string {
		return []string{"--clickhouse", addr, "--clickhouse-database", db, "--clickhouse-tls-ca", caFile,
			"--clickhouse-user", "canon", "--clickhouse-password-file", pwFile}
	}

	bin := testenv.BuildCanon(t)
	canon := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := canon(append([]string{"migrate"}, flags(srv.SecureAddr, ca.CertFile, right)...)...)
	if err != nil || !strings.Contains(out, "0001_") || !strings.Contains(out, " applied") || !strings.Contains(out, "is up to date") {
		t.Fatalf("canon migrate over TLS: %v\n%s", err, out)
	}
	out, err = canon(append([]string{"migrate"}, flags(srv.SecureAddr, ca.CertFile, right)...)...)
	if err != nil || !strings.Contains(out, "already applied") || strings.Count(out, "applied") != strings.Count(out, "already applied") {
		t.Fatalf("canon migrate over TLS, again: %v\n%s", err, out)
	}

	// The tables are there, seen from the plain port.
	plain, err := clickhouse.Open(chserver.Options(srv.Addr, "default"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var tables uint64
	if err := plain.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name IN ('versions', 'schema_migrations')", db).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("tables of %s after canon migrate: %d, %v", db, tables, err)
	}

	// The projector's connection from the same flags writes and reads.
	cmd := &cobra.Command{Use: "migrate"}
	f := &clickhouseFlags{}
	f.register(cmd)
	if err := cmd.ParseFlags(flags(srv.SecureAddr, ca.CertFile, right)); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.Password != password || cfg.Username != "canon" {
		t.Fatalf("config of the flags: TLS %v, user %q, password %q", cfg.TLS != nil, cfg.Username, cfg.Password)
	}
	conn, err := cfg.Open(ctx)
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	defer conn.Close()
	var user string // 18.16 has no currentUser(): this query's own row
	if err := conn.QueryRow(ctx, "SELECT user FROM system.processes WHERE query LIKE '%user-probe%' LIMIT 1").Scan(&user); err != nil || user != "canon" {
		t.Fatalf("current user over TLS: %q, %v", user, err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE "+db+".tls_probe (a String) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".tls_probe (a)")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"over", "tls"} {
		if err := batch.Append(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("insert over TLS: %v", err)
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(a), ' ') FROM (SELECT a FROM "+db+".tls_probe ORDER BY a)").Scan(&got); err != nil || got != "over tls" {
		t.Fatalf("read over TLS: %q, %v", got, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong password", flags(srv.SecureAddr, ca.CertFile, wrong), "check --clickhouse-user and the password (--clickhouse-password-file"},
		{"untrusted server certificate", flags(srv.SecureAddr, other.CertFile, right), "pass its CA with --clickhouse-tls-ca"},
		{"TLS to the plain port", flags(srv.Addr, ca.CertFile, right), "give its secure native port in --clickhouse"},
	} {
		out, err := canon(append([]string{"migrate"}, tc.args...)...)
		t.Logf("%s: %s", tc.name, strings.TrimSpace(out))
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: canon migrate %s: %v\n%s\nwant an error that says %q", tc.name, strings.Join(tc.args, " "), err, out, tc.want)
		}
	}

	// A server that requires a client certificate signed by its CA.
	mtls, err := chserver.Start(ctx, chserver.Config{
		Dir:    filepath.Join(dir, "mtls"),
		Secure: &chserver.Secure{CertFile: certFile, KeyFile: keyFile, CAFile: ca.CertFile},
		Users:  []chserver.User{{Name: "canon", Password: password}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mtls.Stop(10 * time.Second) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the mTLS ClickHouse log:\n%s", mtls.Tail(60))
		}
	})
	clientCert, clientKey, err := ca.Issue("client")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, strangerKey, err := other.Issue("stranger")
	if err != nil {
		t.Fatal(err)
	}
	withCert := func(cert, key string) []string {
		return append(flags(mtls.SecureAddr, ca.CertFile, right), "--clickhouse-tls-cert", cert, "--clickhouse-tls-key", key)
	}
	out, err = canon(append([]string{"migrate"}, withCert(clientCert, clientKey)...)...)
	if err != nil || !strings.Contains(out, "is up to date") {
		t.Fatalf("canon migrate with a client certificate: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no client certificate", flags(mtls.SecureAddr, ca.CertFile, right)},
		{"client certificate of another CA", withCert(strangerCert, strangerKey)},
	} {
		const want = "--clickhouse-tls-cert and --clickhouse-tls-key"
		out, err := canon(append([]string{"migrate"}, tc.args...)...)
		t.Logf("%s: %s", tc.name, strings.TrimSpace(out))
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("%s: canon migrate %s: %v\n%s\nwant an error that says %q", tc.name, strings.Join(tc.args, " "), err, out, want)
		}
	}
}
