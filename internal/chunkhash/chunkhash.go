// Package chunkhash checks the SHA-256 of a body stored as chunks without
// hashing again the chunks it shares with a body checked before it.
//
// The next version of an edited large item starts with the chunks of the
// version before it, up to the chunk that holds the edit. A Checked body
// keeps the hash's state after every Every chunks; a Hasher for a body
// that starts with the same chunks resumes from the last state within
// them. The store (checking the bodies it applies) and the ClickHouse
// projector (checking the bodies it reassembles) both use it.
package chunkhash

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"fmt"
	"hash"
)

// Every is how many chunks (about 2 KiB each) separate the saved states of
// a checked body: a state is some 100 bytes.
const Every = 4

// Checked is a body whose hash was checked: its chunks and the SHA-256
// state (and the bytes hashed) after every Every chunks.
type Checked[K comparable] struct {
	Chunks []K
	states [][]byte
	sizes  []int64
}

// Listed is a body known to hash to its hash without a hash computed
// here (the store's ApplyDecided): a later body learns which of its
// chunks are stored from it, and resumes no hash from it.
func Listed[K comparable](chunks []K) *Checked[K] {
	return &Checked[K]{Chunks: append([]K(nil), chunks...)}
}

// Hasher hashes a body chunk by chunk from Start.
type Hasher[K comparable] struct {
	h      hash.Hash
	chunks []K
	// Start is the first chunk to Write: the chunks before it were
	// hashed by the body resumed from.
	Start int
	// Size is the bytes hashed so far, resumed ones included.
	Size int64
	next int
	keep *Checked[K]
}

// New starts the hash of a body of chunks, resuming from prev (nil: none)
// when the body starts with at least Every of prev's chunks. Bodies of
// fewer than 2*Every chunks are hashed whole and not kept.
func New[K comparable](chunks []K, prev *Checked[K]) (*Hasher[K], error) {
	hs := &Hasher[K]{h: sha256.New(), chunks: chunks}
	if len(chunks) < 2*Every {
		return hs, nil
	}
	hs.keep = &Checked[K]{}
	if prev != nil {
		if n := min(SamePrefix(prev.Chunks, chunks)/Every, len(prev.states)); n > 0 {
			if err := resume(hs.h, prev.states[n-1]); err != nil {
				return nil, err
			}
			hs.Start, hs.Size = n*Every, prev.sizes[n-1]
			hs.keep.states, hs.keep.sizes = prev.states[:n:n], prev.sizes[:n:n]
		}
	}
	hs.next = hs.Start
	return hs, nil
}

// Write hashes the next chunk's bytes (chunk Start first, then in order).
func (hs *Hasher[K]) Write(data []byte) error {
	hs.h.Write(data)
	hs.Size += int64(len(data))
	hs.next++
	if hs.keep != nil && hs.next%Every == 0 {
		st, err := save(hs.h)
		if err != nil {
			return err
		}
		hs.keep.states, hs.keep.sizes = append(hs.keep.states, st), append(hs.keep.sizes, hs.Size)
	}
	return nil
}

// Sum is the SHA-256 of the body, once every chunk was written; checked
// is what a later body may resume from (nil for a short body). Keep it
// only if the sum is the body's hash.
func (hs *Hasher[K]) Sum() (sum [32]byte, checked *Checked[K]) {
	hs.h.Sum(sum[:0])
	if hs.keep != nil {
		hs.keep.Chunks = append([]K(nil), hs.chunks...)
	}
	return sum, hs.keep
}

// MarkEvery is how many bytes separate the saved states of Marks.
const MarkEvery = 16 << 10

// Marks are the SHA-256 states of a body after every MarkEvery bytes, for
// one whose chunks are not known yet (the Decider hashes a new body
// before it cuts it): a body that starts with the same bytes resumes from
// the last state within them.
type Marks struct {
	states [][]byte
}

// Sum is the SHA-256 of body, resumed from the marks of prev (a body that
// hashed to them) when both start with the same MarkEvery bytes or more,
// and body's own marks (nil for a body shorter than 2*MarkEvery).
func Sum(body, prev []byte, prevMarks *Marks) (sum [32]byte, marks *Marks, err error) {
	if len(body) < 2*MarkEvery {
		return sha256.Sum256(body), nil, nil
	}
	h := sha256.New()
	marks = &Marks{}
	at := 0
	if prevMarks != nil && len(prev) >= MarkEvery {
		n := min(len(prev), len(body), len(prevMarks.states)*MarkEvery)
		same := CommonPrefix(prev[:n], body[:n])
		if k := same / MarkEvery; k > 0 {
			if err := resume(h, prevMarks.states[k-1]); err != nil {
				return sum, nil, err
			}
			at = k * MarkEvery
			marks.states = prevMarks.states[:k:k]
		}
	}
	for at+MarkEvery <= len(body) {
		h.Write(body[at : at+MarkEvery])
		at += MarkEvery
		st, err := save(h)
		if err != nil {
			return sum, nil, err
		}
		marks.states = append(marks.states, st)
	}
	h.Write(body[at:])
	h.Sum(sum[:0])
	return sum, marks, nil
}

// Bytes is what the marks keep alive, about.
func (m *Marks) Bytes() int { return len(m.states) * 128 }

// SamePrefix is how many chunks lists a and b share from their start.
func SamePrefix[K comparable](a, b []K) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// SameEnds is how many chunks lists a and b share from their start
// (pre), and then from their end among the chunks after those (suf): of
// b, the chunks [pre, len(b)-suf) are the ones around an edit of a.
func SameEnds[K comparable](a, b []K) (pre, suf int) {
	pre = SamePrefix(a, b)
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	return pre, suf
}

// CommonPrefix is the length of the longest common prefix of a and b, of
// equal length.
func CommonPrefix(a, b []byte) int {
	const step = 4 << 10
	n := 0
	for n+step <= len(a) && bytes.Equal(a[n:n+step], b[n:n+step]) {
		n += step
	}
	for n < len(a) && a[n] == b[n] {
		n++
	}
	return n
}

// CommonSuffix is the length of the longest common suffix of a and b.
func CommonSuffix(a, b []byte) int {
	const step = 4 << 10
	n := 0
	m := min(len(a), len(b))
	for n+step <= m && bytes.Equal(a[len(a)-n-step:len(a)-n], b[len(b)-n-step:len(b)-n]) {
		n += step
	}
	for n < m && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

// save is h's state, for resume.
func save(h hash.Hash) ([]byte, error) {
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("save a body's hash: %w", err)
	}
	return st, nil
}

// resume sets h to a state save returned.
func resume(h hash.Hash, st []byte) error {
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
		return fmt.Errorf("resume a body's hash: %w", err)
	}
	return nil
}
