package model

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	chunkers "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers "fastcdc-v1.0.0"
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
	bufp := chunkBuffers.Get().(*[]byte)
	defer chunkBuffers.Put(bufp)
	c, err := chunkers.NewChunkerBuffer(chunkAlgorithm, bytes.NewReader(body), &chunkers.ChunkerOpts{
		MinSize:    ChunkMinSize,
		NormalSize: ChunkAvgSize,
		MaxSize:    ChunkMaxSize,
	}, *bufp)
	if err != nil {
		// Only a programming error (constants, registration) gets here.
		panic(fmt.Sprintf("model: set up chunker: %v", err))
	}
	out := make([][]byte, 0, len(body)/ChunkAvgSize+1)
	off := 0
	for {
		// The chunker's slices alias its buffer: return the same range of
		// body instead.
		chunk, err := c.Next()
		if err != nil && !errors.Is(err, io.EOF) {
			panic(fmt.Sprintf("model: chunk body: %v", err)) // a bytes.Reader does not fail
		}
		if n := len(chunk); n > 0 {
			out = append(out, body[off:off+n:off+n])
			off += n
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if off != len(body) {
		panic(fmt.Sprintf("model: chunker covered %d of %d bytes", off, len(body)))
	}
	return out
}
