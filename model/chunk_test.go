package model

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// testBytes is n bytes of a fixed pseudo-random sequence (splitmix64), the
// same on every machine and Go release.
func testBytes(n int, seed uint64) []byte {
	b := make([]byte, 0, n+8)
	x := seed
	for len(b) < n {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		for i := 0; i < 8; i++ {
			b = append(b, byte(z>>(8*i)))
		}
	}
	return b[:n]
}

// testText is a canonical JSON string of about n bytes of words, like a
// document body.
func testText(n int, seed uint64) []byte {
	words := []string{"sync", "canon", "version", "the", "of", "a", "mutation", "branch", "item", "kafka", "store", "client"}
	r := testBytes(n, seed)
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; b.Len() < n-1; i++ {
		b.WriteString(words[int(r[i%len(r)])%len(words)])
		b.WriteByte(' ')
	}
	b.WriteByte('"')
	return []byte(b.String())
}

func chunkLens(chunks [][]byte) []int {
	l := make([]int, len(chunks))
	for i, c := range chunks {
		l[i] = len(c)
	}
	return l
}

// The chunk boundaries are part of the storage format: these are golden.
// If this test fails, chunking changed and stored bodies no longer share
// chunks with new ones.
func TestSplitBodyGolden(t *testing.T) {
	body := testBytes(40<<10, 1)
	got := fmt.Sprint(chunkLens(SplitBody(body)))
	const want = "[3104 2058 1764 2403 2229 2253 1447 720 2546 2704 2573 2743 2645 3792 2303 2122 2859 695]"
	if got != want {
		t.Errorf("chunk lengths of the golden input:\n got %s\nwant %s", got, want)
	}
	chunks := SplitBody(body)
	if h := BodyHash(chunks[0]); h != "41994e0608b2d77e6af23d6fc807c28f6251b6dd36c56adcad9acf6ec401547c" {
		t.Errorf("first chunk hash %s", h)
	}
}

func TestSplitBody(t *testing.T) {
	for _, n := range []int{0, 1, ChunkMinSize - 1, ChunkMinSize} {
		body := testBytes(n, 2)
		chunks := SplitBody(body)
		if len(chunks) != 1 || !bytes.Equal(chunks[0], body) {
			t.Errorf("a %d-byte body: %d chunks, want 1", n, len(chunks))
		}
	}
	for _, body := range [][]byte{testBytes(100<<10, 3), testText(100<<10, 3), bytes.Repeat([]byte("a"), 50<<10)} {
		chunks := SplitBody(body)
		if !bytes.Equal(bytes.Join(chunks, nil), body) {
			t.Fatalf("the chunks do not make up the body")
		}
		for i, c := range chunks {
			if len(c) > ChunkMaxSize || (len(c) < ChunkMinSize && i != len(chunks)-1) {
				t.Errorf("chunk %d of %d is %d bytes", i, len(chunks), len(c))
			}
		}
		if avg := len(body) / len(chunks); avg < ChunkMinSize || avg > ChunkMaxSize {
			t.Errorf("average chunk size %d", avg)
		}
		// Deterministic: the same body cuts the same way.
		if fmt.Sprint(chunkLens(SplitBody(bytes.Clone(body)))) != fmt.Sprint(chunkLens(chunks)) {
			t.Errorf("two splits of one body differ")
		}
	}
	// Random data averages near ChunkAvgSize.
	if n := len(SplitBody(testBytes(1<<20, 4))); n < (1<<20)/(2*ChunkAvgSize) || n > (1<<20)/(ChunkAvgSize/2) {
		t.Errorf("1 MiB of random data made %d chunks, want about %d", n, (1<<20)/ChunkAvgSize)
	}
}

// newChunks counts the chunks of b that a does not have, and their bytes.
func newChunks(a, b []byte) (n, size int) {
	have := map[string]bool{}
	for _, c := range SplitBody(a) {
		have[BodyHash(c)] = true
	}
	for _, c := range SplitBody(b) {
		if !have[BodyHash(c)] {
			n++
			size += len(c)
		}
	}
	return n, size
}

// A 1-byte edit in the middle of a 100 KB body changes one or two chunks;
// so does a 1-byte insertion, after which the boundaries fall back in
// step.
func TestSplitBodyLocality(t *testing.T) {
	for name, body := range map[string][]byte{"random": testBytes(100<<10, 5), "text": testText(100<<10, 5)} {
		for _, at := range []int{len(body) / 2, len(body)/2 + 777, len(body) / 3} {
			edited := bytes.Clone(body)
			edited[at] ^= 0x20
			if n, size := newChunks(body, edited); n < 1 || n > 2 {
				t.Errorf("%s: editing byte %d changed %d chunks (%d bytes), want 1 or 2", name, at, n, size)
			}
			inserted := append(append(bytes.Clone(body[:at]), 'x'), body[at:]...)
			if n, size := newChunks(body, inserted); n < 1 || n > 2 {
				t.Errorf("%s: inserting at byte %d changed %d chunks (%d bytes), want 1 or 2", name, at, n, size)
			}
		}
	}
}

func BenchmarkSplitBody100K(b *testing.B) {
	body := testText(100<<10, 6)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		SplitBody(body)
	}
}
