package auth

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newKeyset(t *testing.T, ids ...string) *Keyset {
	t.Helper()
	k := NewKeyset()
	for _, id := range ids {
		if err := k.Generate(id); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func claims() Claims {
	c := Claims{Org: "acme", Projects: []string{"roadmap", "team-*"}, Scopes: []string{ScopeWrite}}
	c.Subject = "user:alice"
	return c
}

func TestIssueVerifyAllow(t *testing.T) {
	k := newKeyset(t, "k1")
	tok, err := k.Issue(claims(), time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Principal() != "user:alice" {
		t.Fatalf("principal %q", c.Principal())
	}
	tests := []struct {
		org, project, scope string
		want                string // "" allowed, else part of the error
	}{
		{"acme", "roadmap", ScopeWrite, ""},
		{"acme", "roadmap", ScopeRead, ""}, // write implies read
		{"acme", "team-blue", ScopeWrite, ""},
		{"acme", "roadmap", ScopeAdmin, "needs admin"},
		{"acme", "budget", ScopeRead, `does not reach project "budget"`},
		{"other", "roadmap", ScopeRead, `for org "acme", not "other"`},
	}
	for _, tt := range tests {
		err := c.Allow(tt.org, tt.project, tt.scope)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s/%s %s: %v", tt.org, tt.project, tt.scope, err)
			}
			continue
		}
		if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s/%s %s: got %v, want forbidden: %s", tt.org, tt.project, tt.scope, err, tt.want)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	k := newKeyset(t, "k1")
	other := newKeyset(t, "k1") // same kid, another key: a forgery
	good, _ := k.Issue(claims(), time.Hour, now)
	forged, _ := other.Issue(claims(), time.Hour, now)
	unknownKid, _ := newKeyset(t, "k9").Issue(claims(), time.Hour, now)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + strings.TrimRight(parts[1], "=") + "x." + parts[2]
	for name, tc := range map[string]struct {
		tok  string
		at   time.Time
		want error
	}{
		"expired":     {good, now.Add(2 * time.Hour), ErrExpired},
		"forged":      {forged, now, ErrInvalidToken},
		"unknown kid": {unknownKid, now, ErrInvalidToken},
		"tampered":    {tampered, now, ErrInvalidToken},
		"garbage":     {"not.a.token", now, ErrInvalidToken},
		"empty":       {"", now, ErrNoToken},
		"alg none":    {"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ4In0.", now, ErrInvalidToken},
	} {
		if _, err := k.Verify(tc.tok, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}
}

func TestRotation(t *testing.T) {
	k := newKeyset(t, "2026-10")
	old, _ := k.Issue(claims(), time.Hour, now)
	if err := k.Generate("2026-11"); err != nil {
		t.Fatal(err)
	}
	fresh, _ := k.Issue(claims(), time.Hour, now)
	// Both verify while both keys are active; the new key signs.
	for _, tok := range []string{old, fresh} {
		if _, err := k.Verify(tok, now); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(fresh, ".") || kidOf(t, k, fresh) != "2026-11" {
		t.Fatalf("new tokens are not signed with the newest key")
	}
	if err := k.Remove("2026-10"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(old, now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token of a removed key still verifies: %v", err)
	}
	// Saved and loaded, verify-only copies verify but cannot sign.
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := k.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadKeyset(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loaded.Verify(fresh, now); err != nil {
		t.Fatal(err)
	}
	if _, err := loaded.VerifyOnly().Issue(claims(), time.Hour, now); err == nil {
		t.Fatal("a verify-only keyset signed a token")
	}
}

func kidOf(t *testing.T, k *Keyset, tok string) string {
	t.Helper()
	for _, id := range k.IDs() {
		single := &Keyset{}
		pub, _ := k.public(id)
		single.keys = []Key{{ID: id, public: pub}}
		if _, err := single.Verify(tok, now); err == nil {
			return id
		}
	}
	return ""
}

func TestClaimsValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Claims){
		"no subject":  func(c *Claims) { c.Subject = "" },
		"no org":      func(c *Claims) { c.Org = "" },
		"no projects": func(c *Claims) { c.Projects = nil },
		"bad pattern": func(c *Claims) { c.Projects = []string{"[x"} },
		"bad scope":   func(c *Claims) { c.Scopes = []string{"root"} },
	} {
		c := claims()
		mutate(&c)
		if _, err := newKeyset(t, "k").Issue(c, time.Hour, now); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

// A token that verified once is remembered, but its expiry and not-before
// are checked at every Verify, its claims are copies, and removing a key
// forgets its tokens, even one whose verification was under way.
func TestVerifyRemembers(t *testing.T) {
	k := newKeyset(t, "k1")
	tok, _ := k.Issue(claims(), time.Hour, now)
	for _, at := range []time.Time{now, now.Add(time.Hour - time.Second), now} {
		c, err := k.Verify(tok, at)
		if err != nil || c.Principal() != "user:alice" {
			t.Fatalf("at %v: %v, %v", at, c, err)
		}
		c.Subject = "user:mallory" // a copy: the next Verify does not see it
	}
	if _, ok := k.verified[tok]; !ok {
		t.Fatal("the token is not remembered")
	}
	for _, at := range []time.Time{now.Add(time.Hour), now.Add(2 * time.Hour)} {
		if _, err := k.Verify(tok, at); !errors.Is(err, ErrExpired) {
			t.Fatalf("at %v, after its expiry: %v", at, err)
		}
	}

	c := claims()
	c.ExpiresAt = jwt.NewNumericDate(now.Add(time.Hour))
	c.NotBefore = jwt.NewNumericDate(now.Add(time.Minute))
	jt := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c)
	jt.Header["kid"] = "k1"
	later, err := jt.SignedString(k.keys[0].private)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(later, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(later, now); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "not valid yet") {
		t.Fatalf("before its not-before: %v", err)
	}

	_, removals := k.verifiedBefore(later, now)
	if err := k.Generate("k2"); err != nil {
		t.Fatal(err)
	}
	if err := k.Remove("k1"); err != nil {
		t.Fatal(err)
	}
	k.rememberVerified(later, &c, removals) // a Verify that began before Remove
	for _, tk := range []string{tok, later} {
		if _, err := k.Verify(tk, now.Add(time.Minute)); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("a token of a removed key verifies: %v", err)
		}
	}
}

// A server's keyset replaced by the file read again forgets the tokens it
// verified with a key the file no longer has, and keeps verifying the rest.
func TestReplaceForgetsRemovedKeys(t *testing.T) {
	ab := newKeyset(t, "a", "b")
	onlyA := &Keyset{keys: append([]Key(nil), ab.keys[0])}
	tokA, _ := onlyA.Issue(claims(), time.Hour, now)
	tokB, _ := ab.Issue(claims(), time.Hour, now)
	served := ab.VerifyOnly()
	for _, tok := range []string{tokA, tokB, tokB} { // the second time from memory
		if _, err := served.Verify(tok, now); err != nil {
			t.Fatal(err)
		}
	}
	served.Replace(onlyA)
	if _, err := served.Verify(tokB, now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token of the removed key still verifies: %v", err)
	}
	if _, err := served.Verify(tokA, now); err != nil {
		t.Fatalf("a token of the kept key: %v", err)
	}
	served.Replace(ab.VerifyOnly())
	if _, err := served.Verify(tokB, now); err != nil {
		t.Fatalf("a token of a key added back: %v", err)
	}
	if _, err := served.Issue(claims(), time.Hour, now); err == nil {
		t.Fatal("a keyset replaced by a verify-only one signed a token")
	}
}

// One parser for every route: the scheme in any case, a bare token (as
// Replicache sends it), and a clear error for another scheme.
func TestBearerToken(t *testing.T) {
	for _, tt := range []struct {
		header, token string
		bad           bool
	}{
		{"", "", false},
		{"Bearer abc.def.ghi", "abc.def.ghi", false},
		{"bearer abc.def.ghi", "abc.def.ghi", false},
		{"BEARER abc.def.ghi", "abc.def.ghi", false},
		{"Bearer   abc.def.ghi  ", "abc.def.ghi", false},
		{"Bearer\tabc.def.ghi", "abc.def.ghi", false},
		{"abc.def.ghi", "abc.def.ghi", false},
		{"  abc.def.ghi ", "abc.def.ghi", false},
		{"Bearer", "", false},
		{"bearer ", "", false},
		{"Basic dXNlcjpwdw==", "", true},
		{"Token abc", "", true},
	} {
		got, err := BearerToken(tt.header)
		if got != tt.token || (err != nil) != tt.bad {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, error %v", tt.header, got, err, tt.token, tt.bad)
		}
		if err != nil && (!errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "Bearer TOKEN")) {
			t.Errorf("BearerToken(%q): %v, want an ErrInvalidToken that says what to send", tt.header, err)
		}
	}
}
