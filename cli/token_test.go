package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/testenv"
)

func TestTokenKeygenIssueRotate(t *testing.T) {
	bin := testenv.BuildCanon(t)
	keys := filepath.Join(t.TempDir(), "keys.json")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("token", "keygen", "--keys", keys, "--kid", "old"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	oldTok, err := run("token", "issue", "--keys", keys, "--subject", "user:alice", "--org", "acme",
		"--projects", "roadmap", "--scopes", "read,write", "--ttl", "1h")
	if err != nil {
		t.Fatalf("%v: %s", err, oldTok)
	}
	if out, err := run("token", "keygen", "--keys", keys, "--kid", "new"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	newTok, _ := run("token", "issue", "--keys", keys, "--subject", "user:bob", "--org", "acme", "--scopes", "read")

	k, err := auth.LoadKeyset(keys)
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(oldTok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.Principal() != "user:alice" || c.Allow("acme", "roadmap", auth.ScopeWrite) != nil || c.Allow("acme", "budget", auth.ScopeRead) == nil {
		t.Fatalf("claims %+v", c)
	}
	if _, err := k.Verify(newTok, time.Now()); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(filepath.Dir(keys), "public.json")
	if out, err := run("token", "public", "--keys", keys, "--out", pub); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	pk, err := auth.LoadKeyset(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pk.Verify(newTok, time.Now()); err != nil {
		t.Fatalf("the public keyset does not verify: %v", err)
	}
	if out, err := run("token", "issue", "--keys", pub, "--subject", "x", "--org", "acme"); err == nil {
		t.Fatalf("the public keyset signed a token: %s", out)
	}
	if st, err := os.Stat(pub); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("public keyset mode %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(keys); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private keyset mode %v %v", st.Mode(), err)
	}
	if out, err := run("token", "rmkey", "--keys", keys, "--kid", "old"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	k, _ = auth.LoadKeyset(keys)
	if _, err := k.Verify(oldTok, time.Now()); err == nil {
		t.Fatal("a token of the removed key still verifies")
	}
	if out, err := run("token", "issue", "--keys", keys, "--subject", "x", "--org", "acme", "--scopes", "root"); err == nil || !strings.Contains(out, `unknown scope "root"`) {
		t.Fatalf("a bad scope was accepted: %s", out)
	}
}
