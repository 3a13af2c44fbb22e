package model

import (
	"bytes"
	"encoding/hex"
	"hash/maphash"

	"github.com/canon-sync/canon/internal/chunkhash"
)

// blobCache keeps, across Resets, what a Decider learnt of large bodies
// and blobs: their bytes by content hash, and the SHA-256 of their chunks
// by content. A large body edited a few characters at a time (item.splice,
// item.patch, item.put of an edited copy) is then neither read back from
// the Reader for the next edit nor hashed again chunk by chunk: only the
// chunks around the edit are new, and only they are hashed.
//
// Everything in it is keyed by content (a body by its SHA-256, a chunk by
// its bytes, compared in full), so it never goes stale: a body that the
// store holds under a hash is the body that hashes to it. It is bounded by
// maxBlobCacheBytes and starts over when it grows past it.
type blobCache struct {
	seed   maphash.Seed
	bodies map[string][]byte
	chunks map[uint64]chunkMemo
	// marks are the SHA-256 states of large bodies every
	// chunkhash.MarkEvery bytes, by hash: the next version of an edited
	// body resumes its hash after the bytes it shares with this one.
	marks map[string]*chunkhash.Marks
	// size counts each body or blob once, whole, when any of it is
	// kept: what it keeps alive (chunks are slices of their blob).
	size, limit int
}

// chunkMemo is a chunk's bytes and their SHA-256 in lower-case hex.
type chunkMemo struct {
	data []byte
	hash string
}

// maxBlobCacheBytes bounds the bytes a Decider keeps of large bodies:
// some 50 versions of 300 KB documents. The process's peak RSS grows by
// up to twice that (the GC lets the heap grow in proportion to what is
// live); the mix measured about 50 MiB more with a bound of 32 MiB.
const maxBlobCacheBytes = 16 << 20

// minCachedBody is the smallest body the cache keeps: a smaller one is a
// single chunk, cheap to read and hash.
const minCachedBody = ChunkMinSize + 1

func newBlobCache() *blobCache {
	return &blobCache{seed: maphash.MakeSeed(), bodies: map[string][]byte{}, chunks: map[uint64]chunkMemo{},
		marks: map[string]*chunkhash.Marks{}, limit: maxBlobCacheBytes}
}

// A nil *blobCache keeps nothing (benchmarks compare with it).

// body returns a body by hash, nil when the cache does not have it. The
// bytes are shared: callers do not change them (tx.body's contract).
func (c *blobCache) body(hash string) []byte {
	if c == nil {
		return nil
	}
	return c.bodies[hash]
}

// addBody keeps a large body, which must hash to hash. A put's body may
// be a slice of its mutation's args, which it then keeps alive: about
// the body's size again at most.
func (c *blobCache) addBody(hash string, body []byte) {
	if c == nil || len(body) < minCachedBody {
		return
	}
	if _, ok := c.bodies[hash]; ok {
		return
	}
	c.grow(len(body))
	c.bodies[hash] = body
}

// chunkHashes returns the SHA-256 of each of parts, the content-defined
// chunks of blob, whose own hash is whole: a chunk seen before is looked
// up (by its bytes, compared in full), a new one hashed and kept.
func (c *blobCache) chunkHashes(blob []byte, whole string, parts [][]byte) []string {
	hashes := make([]string, len(parts))
	if len(parts) == 1 {
		hashes[0] = whole // a one-chunk blob is its own chunk
		return hashes
	}
	if c == nil {
		for i, p := range parts {
			hashes[i] = BodyHash(p)
		}
		return hashes
	}
	kept := false
	for i, p := range parts {
		k := maphash.Bytes(c.seed, p)
		if m, ok := c.chunks[k]; ok && bytes.Equal(m.data, p) {
			hashes[i] = m.hash
			continue
		}
		if !kept {
			// Counted before the chunk goes in: a start over keeps it.
			c.grow(len(blob))
			kept = true
		}
		hashes[i] = BodyHash(p)
		c.chunks[k] = chunkMemo{data: p, hash: hashes[i]}
	}
	return hashes
}

// grow accounts for n more bytes kept, starting over first if they would
// pass the bound.
func (c *blobCache) grow(n int) {
	if c.size+n > c.limit {
		clear(c.bodies)
		clear(c.chunks)
		clear(c.marks)
		c.size = 0
	}
	c.size += n
}

// bodyHash is BodyHash(body) for a body that replaces prev (nil when it
// is not in memory), whose hash is prevHash: a large body that starts
// with the same bytes as prev resumes the hash of prev after them, from
// the marks kept when prev was hashed here.
func (c *blobCache) bodyHash(body []byte, prevHash string, prev []byte) string {
	if c == nil || len(body) < 2*chunkhash.MarkEvery {
		return BodyHash(body)
	}
	var pm *chunkhash.Marks
	if prev != nil {
		pm = c.marks[prevHash]
	}
	sum, m, err := chunkhash.Sum(body, prev, pm)
	if err != nil {
		return BodyHash(body) // crypto/sha256 saves and restores its states
	}
	hash := hex.EncodeToString(sum[:])
	if _, ok := c.marks[hash]; !ok && m != nil {
		c.grow(m.Bytes())
		c.marks[hash] = m
	}
	return hash
}
