// Package auth issues and verifies Canon's access tokens: JWTs signed with
// Ed25519 (EdDSA), naming an org, the projects they reach (names or glob
// patterns), scopes (read, write, admin), an expiry, and the key that
// signed them (kid), so that keys can be rotated with several active at
// once.
package auth

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Scopes a token can carry. admin implies write, which implies read.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
	ScopeAdmin = "admin"
)

// Errors of Verify and Claims.Allow. Each is wrapped with what to do.
var (
	// ErrNoToken: the request carries no bearer token.
	ErrNoToken = errors.New("no token")
	// ErrInvalidToken: the token is malformed, forged, signed by an unknown
	// key, or expired.
	ErrInvalidToken = errors.New("invalid token")
	// ErrExpired: the token was valid but has expired (also ErrInvalidToken).
	ErrExpired = errors.New("token expired")
	// ErrForbidden: a valid token that does not reach the org, project or
	// scope asked for.
	ErrForbidden = errors.New("forbidden")
)

// Claims are what a Canon token says.
type Claims struct {
	// Org is the one org the token reaches.
	Org string `json:"org"`
	// Projects are project names or path.Match patterns ("*" for all).
	Projects []string `json:"projects"`
	// Scopes are some of read, write, admin.
	Scopes []string `json:"scopes"`
	jwt.RegisteredClaims
}

// Principal is who the token speaks for: its subject.
func (c *Claims) Principal() string { return c.Subject }

// Allow returns nil if the token may act with scope on org/project, and an
// ErrForbidden that says why not otherwise.
func (c *Claims) Allow(org, project, scope string) error {
	if c.Org != org {
		return fmt.Errorf("%w: the token is for org %q, not %q", ErrForbidden, c.Org, org)
	}
	if !c.reaches(project) {
		return fmt.Errorf("%w: the token does not reach project %q (it reaches %s)", ErrForbidden, project, strings.Join(c.Projects, ", "))
	}
	if !c.HasScope(scope) {
		return fmt.Errorf("%w: the token has scopes %s; this needs %s", ErrForbidden, strings.Join(c.Scopes, ", "), scope)
	}
	return nil
}

func (c *Claims) reaches(project string) bool {
	for _, p := range c.Projects {
		if ok, err := path.Match(p, project); err == nil && ok {
			return true
		}
	}
	return false
}

// HasScope reports whether the token carries scope or one that implies it.
func (c *Claims) HasScope(scope string) bool {
	rank := map[string]int{ScopeRead: 1, ScopeWrite: 2, ScopeAdmin: 3}
	want := rank[scope]
	if want == 0 {
		return false
	}
	for _, s := range c.Scopes {
		if rank[s] >= want {
			return true
		}
	}
	return false
}

// Validate checks claims before they are signed.
func (c *Claims) Validate() error {
	switch {
	case c.Subject == "":
		return errors.New("a token needs a subject: the principal it speaks for")
	case c.Org == "":
		return errors.New("a token needs an org")
	case len(c.Projects) == 0:
		return errors.New("a token needs at least one project name or pattern (\"*\" for all)")
	case len(c.Scopes) == 0:
		return errors.New("a token needs at least one scope: read, write or admin")
	}
	for _, p := range c.Projects {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("project pattern %q: %w", p, err)
		}
	}
	for _, s := range c.Scopes {
		if !slices.Contains([]string{ScopeRead, ScopeWrite, ScopeAdmin}, s) {
			return fmt.Errorf("unknown scope %q: use read, write or admin", s)
		}
	}
	return nil
}

// Issue signs claims with the keyset's signing key, valid for ttl from now.
func (k *Keyset) Issue(c Claims, ttl time.Duration, now time.Time) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", errors.New("a token needs a positive lifetime")
	}
	key, err := k.signingKey()
	if err != nil {
		return "", err
	}
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c)
	t.Header["kid"] = key.ID
	return t.SignedString(key.private)
}

// Verify checks a token's signature (by its kid, among the active keys),
// expiry and claims, and returns the claims.
//
// A token that verified is remembered (until a key is removed), so that a
// client sending the same token with every request costs one Ed25519
// verification, not one per request: then only the times, which depend
// on now, are checked again.
func (k *Keyset) Verify(token string, now time.Time) (*Claims, error) {
	if token == "" {
		return nil, ErrNoToken
	}
	c, removals := k.verifiedBefore(token, now)
	if c != nil {
		return c, nil
	}
	c = &Claims{}
	_, err := jwt.ParseWithClaims(token, c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		pub, ok := k.public(kid)
		if !ok {
			return nil, fmt.Errorf("unknown key id %q", kid)
		}
		return pub, nil
	}, jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired())
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, fmt.Errorf("%w: %w: get a new token", ErrInvalidToken, ErrExpired)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	k.rememberVerified(token, c, removals)
	return c, nil
}

// maxVerified bounds the tokens a keyset remembers.
const maxVerified = 4096

// verifiedBefore returns a copy of the claims of a token that verified
// before, if they are valid at now as the JWT parser checks them (an
// expiry after now, a not-before at or before now); nil otherwise, and
// then Verify checks the token in full and says what is wrong. removals
// counts the keys removed so far.
func (k *Keyset) verifiedBefore(token string, now time.Time) (_ *Claims, removals uint64) {
	k.mu.RLock()
	c, removals := k.verified[token], k.removals
	k.mu.RUnlock()
	if c == nil || c.ExpiresAt == nil || !now.Before(c.ExpiresAt.Time) || c.NotBefore != nil && now.Before(c.NotBefore.Time) {
		return nil, removals
	}
	cp := *c
	return &cp, removals
}

// rememberVerified remembers the claims of a token that verified, unless
// a key was removed since the verification began: it may have been the
// token's.
func (k *Keyset) rememberVerified(token string, c *Claims, removals uint64) {
	cp := *c
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.removals != removals {
		return
	}
	if k.verified == nil || len(k.verified) >= maxVerified {
		k.verified = make(map[string]*Claims)
	}
	k.verified[token] = &cp
}

// BearerToken returns the token of an Authorization header value, the one
// parser of every route (push, reads, Replicache, the websocket):
// "Bearer TOKEN" with the scheme in any case (RFC 9110 section 11.1: the
// scheme is case-insensitive) and any spaces around the token, or a bare
// TOKEN, which is what Replicache sends (its auth option is the header's
// value as it is). It returns "" for an empty header, and an
// ErrInvalidToken that says what to send for another scheme.
func BearerToken(header string) (string, error) {
	h := strings.TrimSpace(header)
	scheme, rest, found := strings.Cut(h, " ")
	if !found {
		scheme, rest, found = strings.Cut(h, "\t")
	}
	if !found {
		if strings.EqualFold(h, "Bearer") {
			return "", nil // the scheme without a token: no token
		}
		return h, nil // a bare token, or nothing
	}
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: the Authorization header has the scheme %q: send 'Authorization: Bearer TOKEN'", ErrInvalidToken, scheme)
	}
	return strings.TrimSpace(rest), nil
}
