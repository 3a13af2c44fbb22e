package schemas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ItemDigest is an item's contribution to the state hash: SHA-256 over its
// collection, id, canonical meta and body hash, each length-prefixed.
func ItemDigest(collection, id string, meta []byte, bodyHash string) [32]byte {
	// The parts are hashed in one piece, from the stack when they fit.
	var buf [512]byte
	b := buf[:0]
	if n := 32 + len(collection) + len(id) + len(meta) + len(bodyHash); n > len(buf) {
		b = make([]byte, 0, n)
	}
	b = appendPart(b, collection)
	b = appendPart(b, id)
	b = appendPart(b, meta)
	b = appendPart(b, bodyHash)
	return sha256.Sum256(b)
}

func appendPart[S string | []byte](b []byte, part S) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(part)))
	return append(b, part...)
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
// its items' digest sum, as lower-case hex. It is computed for every
// version, by the sequencer and by the store: common scalars are written
// canonically as they are, the others go through jcs.
func (s StateHasher) StateHash(scalars map[string]json.RawMessage) (string, error) {
	var sc [32]byte
	var buf [512]byte
	if canon, ok := quickScalars(buf[:0], scalars); ok {
		sc = sha256.Sum256(canon)
	} else {
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
		sc = sha256.Sum256(canon)
	}
	var b [len(stateHashDomain) + 64]byte
	copy(b[:], stateHashDomain)
	copy(b[len(stateHashDomain):], sc[:])
	copy(b[len(stateHashDomain)+32:], s.Sum[:])
	h := sha256.Sum256(b[:])
	var x [2 * sha256.Size]byte
	hex.Encode(x[:], h[:])
	return string(x[:]), nil
}

const stateHashDomain = "canon-state/v1\x00"

// quickScalars appends to dst the canonical JSON of the scalars when it
// can be written without canonicalizing: names that need no escaping
// (ASCII, which also sorts them as RFC 8785 does) and values that are
// canonical as they are (canonicalAsIs). ok is false otherwise.
func quickScalars(dst []byte, scalars map[string]json.RawMessage) ([]byte, bool) {
	if len(scalars) == 0 {
		return append(dst, '{', '}'), true
	}
	if len(scalars) > 16 {
		return nil, false
	}
	var buf [16]string
	names := buf[:0]
	for name, v := range scalars {
		for i := 0; i < len(name); i++ {
			if c := name[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
				return nil, false
			}
		}
		if !canonicalAsIs(v) {
			return nil, false
		}
		names = append(names, name)
	}
	slices.Sort(names)
	out := dst
	for i, name := range names {
		if i == 0 {
			out = append(out, '{')
		} else {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, name...)
		out = append(out, '"', ':')
		out = append(out, scalars[name]...)
	}
	return append(out, '}'), true
}
