package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
)

// Key is one Ed25519 key of a keyset.
type Key struct {
	ID      string
	public  ed25519.PublicKey
	private ed25519.PrivateKey // nil for a verify-only key
}

// Keyset holds the keys tokens are verified with, and the one new tokens
// are signed with (the newest key that has a private part). Rotation: add
// a key (it signs from then on), keep the old one until its tokens
// expire, then remove it.
type Keyset struct {
	mu   sync.RWMutex
	keys []Key
	// verified are the claims of tokens that verified with keys, by token;
	// cleared when a key is removed, which removals counts.
	verified map[string]*Claims
	removals uint64
}

// keyFile is the JSON form of a keyset on disk.
type keyFile struct {
	Keys []keyJSON `json:"keys"`
}

type keyJSON struct {
	ID      string `json:"kid"`
	Alg     string `json:"alg"`
	Public  string `json:"public"`
	Private string `json:"private,omitempty"`
}

var reKeyID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// NewKeyset returns an empty keyset.
func NewKeyset() *Keyset { return &Keyset{} }

// Generate adds a new key with id kid; it becomes the signing key.
func (k *Keyset) Generate(kid string) error {
	if !reKeyID.MatchString(kid) {
		return fmt.Errorf("key id %q: use 1-64 letters, digits, '.', '_' or '-'", kid)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range k.keys {
		if key.ID == kid {
			return fmt.Errorf("key id %q is already in the keyset", kid)
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	k.keys = append(k.keys, Key{ID: kid, public: pub, private: priv})
	return nil
}

// Remove drops a key: tokens it signed stop verifying.
func (k *Keyset) Remove(kid string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, key := range k.keys {
		if key.ID == kid {
			k.keys = append(k.keys[:i], k.keys[i+1:]...)
			k.verified, k.removals = nil, k.removals+1 // its tokens must fail from now on
			return nil
		}
	}
	return fmt.Errorf("no key %q in the keyset", kid)
}

// Replace makes k verify with the keys of from (a keyset file read
// again) and forgets the tokens it verified so far, so that the tokens
// of a key that from lacks stop verifying at once, also those
// remembered. Pass from.VerifyOnly() to keep private keys out of k.
func (k *Keyset) Replace(from *Keyset) {
	from.mu.RLock()
	keys := append([]Key(nil), from.keys...)
	from.mu.RUnlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = keys
	k.verified, k.removals = nil, k.removals+1
}

// IDs lists the key ids, oldest first.
func (k *Keyset) IDs() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.ID
	}
	return ids
}

func (k *Keyset) public(kid string) (ed25519.PublicKey, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, key := range k.keys {
		if key.ID == kid {
			return key.public, true
		}
	}
	return nil, false
}

func (k *Keyset) signingKey() (Key, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for i := len(k.keys) - 1; i >= 0; i-- {
		if k.keys[i].private != nil {
			return k.keys[i], nil
		}
	}
	return Key{}, errors.New("the keyset has no private key to sign with: add one with 'canon token keygen'")
}

// LoadKeyset reads a keyset file (JSON: {"keys":[{"kid","alg":"EdDSA","public","private"}]},
// keys in base64).
func LoadKeyset(path string) (*Keyset, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read keyset: %w", err)
	}
	var f keyFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("keyset %s is not valid JSON: %w", path, err)
	}
	k := NewKeyset()
	for i, kj := range f.Keys {
		if kj.Alg != "EdDSA" {
			return nil, fmt.Errorf("keyset %s: key %d (%q): alg %q: only EdDSA is supported", path, i, kj.ID, kj.Alg)
		}
		if !reKeyID.MatchString(kj.ID) {
			return nil, fmt.Errorf("keyset %s: key %d: bad key id %q", path, i, kj.ID)
		}
		pub, err := base64.StdEncoding.DecodeString(kj.Public)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("keyset %s: key %q: public key is not %d bytes of base64", path, kj.ID, ed25519.PublicKeySize)
		}
		key := Key{ID: kj.ID, public: pub}
		if kj.Private != "" {
			priv, err := base64.StdEncoding.DecodeString(kj.Private)
			if err != nil || len(priv) != ed25519.PrivateKeySize {
				return nil, fmt.Errorf("keyset %s: key %q: private key is not %d bytes of base64", path, kj.ID, ed25519.PrivateKeySize)
			}
			key.private = priv
			if !key.public.Equal(key.private.Public()) {
				return nil, fmt.Errorf("keyset %s: key %q: the private key does not match the public key", path, kj.ID)
			}
		}
		for _, other := range k.keys {
			if other.ID == key.ID {
				return nil, fmt.Errorf("keyset %s: key id %q appears twice", path, key.ID)
			}
		}
		k.keys = append(k.keys, key)
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("keyset %s has no keys: create one with 'canon token keygen --keys %s'", path, path)
	}
	return k, nil
}

// Save writes the keyset to path atomically, mode 0600 when it holds a
// private key and 0644 when it only verifies.
func (k *Keyset) Save(path string) error {
	k.mu.RLock()
	f := keyFile{Keys: make([]keyJSON, len(k.keys))}
	for i, key := range k.keys {
		f.Keys[i] = keyJSON{ID: key.ID, Alg: "EdDSA", Public: base64.StdEncoding.EncodeToString(key.public)}
		if key.private != nil {
			f.Keys[i].Private = base64.StdEncoding.EncodeToString(key.private)
		}
	}
	k.mu.RUnlock()
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keys-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename
	perm := os.FileMode(0o644)
	for _, key := range f.Keys {
		if key.Private != "" {
			perm = 0o600
		}
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// VerifyOnly returns a copy of the keyset without private keys, for the
// services that only verify tokens.
func (k *Keyset) VerifyOnly() *Keyset {
	k.mu.RLock()
	defer k.mu.RUnlock()
	c := NewKeyset()
	for _, key := range k.keys {
		c.keys = append(c.keys, Key{ID: key.ID, public: key.public})
	}
	return c
}
