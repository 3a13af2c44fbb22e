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
// maxBlobCacheBytes, in two generations of half of it: when the current
// one is full it becomes the old one (the one before is dropped), and
// what is found in the old one moves to the current one. The bodies being
// edited stay in memory; a start over of everything read each of them
// from the store again.
type blobCache struct {
	seed   maphash.Seed
	bodies map[string][]byte
	chunks map[uint64]chunkMemo
	// marks are the SHA-256 states of large bodies every
	// chunkhash.MarkEvery bytes, by hash: the next version of an edited
	// body resumes its hash after the bytes it shares with this one.
	marks map[string]*chunkhash.Marks
	// splits are how large bodies were cut, by hash: the next version of
	// an edited body is cut again only around the edit (resplitBody).
	splits map[string]bodySplit
	// oldBodies, oldChunks, oldMarks and oldSplits are the generation
	// before.
	oldBodies map[string][]byte
	oldChunks map[uint64]chunkMemo
	oldMarks  map[string]*chunkhash.Marks
	oldSplits map[string]bodySplit
	// noResplit cuts every body whole (benchmarks compare).
	noResplit bool
	// size counts each body or blob once, whole, when any of it is
	// kept: what it keeps alive (chunks are slices of their blob).
	size, limit int
}

// bodySplit is how a body was cut: each chunk's end offset and hash.
type bodySplit struct {
	ends   []int32
	hashes []string
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
		marks: map[string]*chunkhash.Marks{}, splits: map[string]bodySplit{}, limit: maxBlobCacheBytes}
}

// A nil *blobCache keeps nothing (benchmarks compare with it).

// body returns a body by hash, nil when the cache does not have it. The
// bytes are shared: callers do not change them (tx.body's contract).
func (c *blobCache) body(hash string) []byte {
	if c == nil {
		return nil
	}
	if b, ok := c.bodies[hash]; ok {
		return b
	}
	b, ok := c.oldBodies[hash]
	if ok {
		c.grow(len(b))
		c.bodies[hash] = b
	}
	return b
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
// up (by its bytes, compared in full), a new one hashed and kept. known,
// when not nil, has the hashes of some of the parts already (the others
// ""): it is filled in and returned.
func (c *blobCache) chunkHashes(blob []byte, whole string, parts [][]byte, known []string) []string {
	hashes := known
	if hashes == nil {
		hashes = make([]string, len(parts))
	}
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
		if hashes[i] != "" {
			continue
		}
		k := maphash.Bytes(c.seed, p)
		if m, ok := c.chunks[k]; ok && bytes.Equal(m.data, p) {
			hashes[i] = m.hash
			continue
		}
		if m, ok := c.oldChunks[k]; ok && bytes.Equal(m.data, p) {
			hashes[i] = m.hash
			c.grow(len(m.data))
			c.chunks[k] = m
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

// grow accounts for n more bytes kept in the current generation, which
// first becomes the old one if they would pass half the bound.
func (c *blobCache) grow(n int) {
	if c.size+n > c.limit/2 {
		c.oldBodies, c.oldChunks, c.oldMarks, c.oldSplits = c.bodies, c.chunks, c.marks, c.splits
		c.bodies, c.chunks, c.marks, c.splits = map[string][]byte{}, map[uint64]chunkMemo{}, map[string]*chunkhash.Marks{}, map[string]bodySplit{}
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
		var ok bool
		if pm, ok = c.marks[prevHash]; !ok {
			pm = c.oldMarks[prevHash]
		}
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

// split is how the body of hash was cut, if the cache has it.
func (c *blobCache) split(hash string) (bodySplit, bool) {
	if c == nil || c.noResplit {
		return bodySplit{}, false
	}
	if sp, ok := c.splits[hash]; ok {
		return sp, true
	}
	sp, ok := c.oldSplits[hash]
	if ok {
		c.grow(sp.bytes())
		c.splits[hash] = sp
	}
	return sp, ok
}

// addSplit keeps how a large body of hash was cut into parts, whose
// hashes are hashes.
func (c *blobCache) addSplit(hash string, parts [][]byte, hashes []string) {
	if c == nil || len(parts) < 2 {
		return
	}
	if _, ok := c.splits[hash]; ok {
		return
	}
	sp := bodySplit{ends: make([]int32, len(parts)), hashes: hashes}
	off := 0
	for i, p := range parts {
		off += len(p)
		sp.ends[i] = int32(off)
	}
	c.grow(sp.bytes())
	c.splits[hash] = sp
}

// bytes is what a split keeps alive, about: its ends and its hashes.
func (sp bodySplit) bytes() int { return len(sp.ends) * (4 + 16 + 64) }
