package schemas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"

	"github.com/gowebpki/jcs"
)

// ItemDigest is an item's contribution to the state hash: SHA-256 over its
// collection, id, canonical meta and body hash, each length-prefixed.
func ItemDigest(collection, id string, meta []byte, bodyHash string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(collection), []byte(id), meta, []byte(bodyHash)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// StateHasher keeps the hash of a state's set of items incrementally: the
// sum modulo 2^256 of the items' digests (an additive multiset hash), so
// that a version that changes k items costs k updates, whatever the
// project's size, and no body is hashed again. It detects divergence
// between replicas and replays; it is not meant to resist an adversary
// crafting collisions.
//
// The zero value is the empty set.
type StateHasher struct {
	Sum [32]byte
}

// Add adds an item digest to the set.
func (s *StateHasher) Add(d [32]byte) { s.apply(d, false) }

// Remove removes an item digest from the set.
func (s *StateHasher) Remove(d [32]byte) { s.apply(d, true) }

func (s *StateHasher) apply(d [32]byte, sub bool) {
	var carry uint64
	for i := 3; i >= 0; i-- {
		a := binary.BigEndian.Uint64(s.Sum[i*8:])
		b := binary.BigEndian.Uint64(d[i*8:])
		var r uint64
		if sub {
			r, carry = bits.Sub64(a, b, carry)
		} else {
			r, carry = bits.Add64(a, b, carry)
		}
		binary.BigEndian.PutUint64(s.Sum[i*8:], r)
	}
}

// StateHash is the hash of a whole state: its scalars (canonical JSON) and
// its items' digest sum, as lower-case hex.
func (s StateHasher) StateHash(scalars map[string]json.RawMessage) (string, error) {
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	raw, err := json.Marshal(scalars)
	if err != nil {
		return "", fmt.Errorf("encode scalars: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("canonicalize scalars: %w", err)
	}
	h := sha256.New()
	h.Write([]byte("canon-state/v1\x00"))
	sc := sha256.Sum256(canon)
	h.Write(sc[:])
	h.Write(s.Sum[:])
	return hex.EncodeToString(h.Sum(nil)), nil
}
