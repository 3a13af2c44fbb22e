package model

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers "fastcdc-v1.0.0"

	"github.com/canon-sync/canon/internal/chunkhash"
)

// Content-defined chunking parameters of item bodies (FastCDC). They are
// part of the storage format: changing any of them changes every chunk
// boundary, so that stored bodies no longer share chunks with new ones
// (nothing breaks, but deduplication restarts from zero). Never change them
// without a new chunking version.
const (
	// ChunkMinSize is the smallest chunk but the last of a body; a body of
	// at most ChunkMinSize bytes is one chunk.
	ChunkMinSize = 512
	// ChunkAvgSize is FastCDC's normal (target average) chunk size.
	ChunkAvgSize = 2 << 10
	// ChunkMaxSize is the largest chunk.
	ChunkMaxSize = 8 << 10
)

// chunkAlgorithm is go-cdc-chunkers' spec-faithful FastCDC: its masks are
// derived from ChunkAvgSize. (The library's "fastcdc" keeps masks tuned for
// an 8 KiB average whatever the options, which would make most of our
// chunks ChunkMaxSize long.)
const chunkAlgorithm = "fastcdc-v1.0.0"

var chunkBuffers = sync.Pool{New: func() any {
	b := make([]byte, ChunkMaxSize)
	return &b
}}

// SplitBody cuts a body into content-defined chunks: an edit changes only
// the chunks around it, so a 1-byte edit of a 100 KB body stores a few KB.
// The boundaries depend only on the bytes (no key, no randomness) and are
// the same on every machine and run. The chunks are sub-slices of body,
// in order; their concatenation is body. A body of at most ChunkMinSize
// bytes (including an empty one) is a single chunk.
func SplitBody(body []byte) [][]byte {
	if len(body) <= ChunkMinSize {
		return [][]byte{body}
	}
	out := make([][]byte, 0, len(body)/ChunkAvgSize+1)
	cutFrom(body, 0, func(start, end int) bool {
		out = append(out, body[start:end:end])
		return true
	})
	return out
}

// cutFrom cuts body into content-defined chunks from byte start, a
// boundary of SplitBody(body), calling each with every chunk's range
// until it returns false or the body ends. FastCDC decides a chunk from
// its own bytes and the one byte after it, and the bytes left when
// fewer than ChunkMaxSize: the chunks from a boundary on are those of
// SplitBody.
func cutFrom(body []byte, start int, each func(start, end int) bool) {
	bufp := chunkBuffers.Get().(*[]byte)
	defer chunkBuffers.Put(bufp)
	c, err := chunkers.NewChunkerBuffer(chunkAlgorithm, bytes.NewReader(body[start:]), &chunkers.ChunkerOpts{
		MinSize:    ChunkMinSize,
		NormalSize: ChunkAvgSize,
		MaxSize:    ChunkMaxSize,
	}, *bufp)
	if err != nil {
		// Only a programming error (constants, registration) gets here.
		panic(fmt.Sprintf("model: set up chunker: %v", err))
	}
	off := start
	for {
		// The chunker's slices alias its buffer: hand out the same range
		// of body instead.
		chunk, err := c.Next()
		if err != nil && !errors.Is(err, io.EOF) {
			panic(fmt.Sprintf("model: chunk body: %v", err)) // a bytes.Reader does not fail
		}
		if n := len(chunk); n > 0 {
			off += n
			if !each(off-n, off) {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if off != len(body) {
		panic(fmt.Sprintf("model: chunker covered %d of %d bytes", off, len(body)))
	}
}

// resplitBody is SplitBody(body) for a body that replaces prev, which
// SplitBody cut at prevEnds (each chunk's end offset): only the part of
// body around what differs from prev is cut again. The chunks of prev
// that end before the first byte that differs (the byte after a chunk
// decided its end) are body's first chunks; from there body is cut until
// one of its boundaries falls in the bytes body and prev end with, at a
// boundary of prev: the chunks after it are prev's last ones. was[i] is
// the index of the chunk of prev that chunk i is, -1 for a new one.
func resplitBody(prev []byte, prevEnds []int32, body []byte) (parts [][]byte, was []int) {
	if len(body) <= ChunkMinSize || len(prevEnds) == 0 || int(prevEnds[len(prevEnds)-1]) != len(prev) {
		parts = SplitBody(body)
		was = make([]int, len(parts))
		for i := range was {
			was[i] = -1
		}
		return parts, was
	}
	n := min(len(prev), len(body))
	pre := chunkhash.CommonPrefix(prev[:n], body[:n])
	suf := chunkhash.CommonSuffix(prev[pre:], body[pre:])
	parts = make([][]byte, 0, len(body)/ChunkAvgSize+1)
	was = make([]int, 0, cap(parts))
	start, k := 0, 0
	for ; k < len(prevEnds) && int(prevEnds[k]) < pre; k++ {
		end := int(prevEnds[k])
		parts, was = append(parts, body[start:end:end]), append(was, k)
		start = end
	}
	delta := len(body) - len(prev)
	tail := len(body) - suf // body[tail:] == prev[tail-delta:]
	rest := -1              // the first chunk of prev after the resync
	cutFrom(body, start, func(s, e int) bool {
		parts, was = append(parts, body[s:e:e]), append(was, -1)
		if e < tail || e == len(body) {
			return true
		}
		for ; k < len(prevEnds) && int(prevEnds[k]) < e-delta; k++ {
		}
		if k < len(prevEnds) && int(prevEnds[k]) == e-delta {
			rest = k + 1
			return false
		}
		return true
	})
	if rest >= 0 {
		start := int(prevEnds[rest-1]) + delta
		for j := rest; j < len(prevEnds); j++ {
			end := int(prevEnds[j]) + delta
			parts, was = append(parts, body[start:end:end]), append(was, j)
			start = end
		}
	}
	return parts, was
}
