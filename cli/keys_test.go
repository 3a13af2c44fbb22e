package cli

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
)

// canon token rmkey revokes on running servers: a server reads its --keys
// file again (every 2s by default, at once on SIGHUP) and then refuses
// the removed key's tokens, also ones it verified before, while the other
// key's tokens still work.
func TestServeReloadsKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("runs canon serve against a real Kafka broker")
	}
	k := testenv.NewKafka(t)
	keysPath := filepath.Join(t.TempDir(), "keys.json")
	keys := auth.NewKeyset()
	issue := func() string {
		tok, err := keys.Issue(auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite},
			RegisteredClaims: jwt.RegisteredClaims{Subject: "user:keys"}}, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if err := keys.Generate("old"); err != nil {
		t.Fatal(err)
	}
	oldTok := issue()
	if err := keys.Generate("new"); err != nil {
		t.Fatal(err)
	}
	newTok := issue()
	if err := keys.Save(keysPath); err != nil {
		t.Fatal(err)
	}

	prefix := k.Topic(t, "keys") + "."
	serve := func(name string, extra ...string) *canonNode {
		return startNode(t, name, append([]string{"serve", "--roles", "producer", "--brokers", strings.Join(k.Brokers, ","),
			"--topic-prefix", prefix, "--keys", keysPath, "--http", "127.0.0.1:0",
			"--data", filepath.Join(testenv.ProcessDir(t, name), "data")}, extra...)...)
	}
	polled := serve("polled")
	hup := serve("sighup", "--keys-reload-interval", "1h") // reloads on SIGHUP only

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// accepted reports whether node took tok: an empty push is refused
	// after authentication (400), a revoked token before (401).
	accepted := func(n *canonNode, tok string) bool {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.base+"/v1/projects/acme/keys/push",
			strings.NewReader(`{"clientGroup":"g","mutations":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusUnauthorized
	}
	waitRefused := func(n *canonNode, what string) {
		t.Helper()
		canontest.Wait(t, ctx, what+" refusing the removed key's token", func() (bool, error) { return !accepted(n, oldTok), nil })
	}
	for _, n := range []*canonNode{polled, hup} {
		for _, tok := range []string{oldTok, newTok} {
			if !accepted(n, tok) {
				t.Fatalf("%s refuses a token of its keyset", n.Name())
			}
		}
	}

	if out, err := exec.Command(testenv.BuildCanon(t), "token", "rmkey", "--keys", keysPath, "--kid", "old").CombinedOutput(); err != nil {
		t.Fatalf("canon token rmkey: %v\n%s", err, out)
	}
	waitRefused(polled, "the server that polls its keyset")
	if !accepted(hup, oldTok) {
		t.Fatal("the server without polling reloaded its keyset by itself")
	}
	hup.Signal(syscall.SIGHUP)
	waitRefused(hup, "the server after SIGHUP")
	for _, n := range []*canonNode{polled, hup} {
		if !accepted(n, newTok) {
			t.Fatalf("%s refuses the kept key's token after the reload", n.Name())
		}
		if !strings.Contains(n.CurrentLog(), `msg="keyset reloaded"`) {
			t.Errorf("%s did not log the reload", n.Name())
		}
	}
}
