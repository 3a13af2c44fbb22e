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

// chunkEnds are the end offsets of chunks cut from one body, in order.
func chunkEnds(chunks [][]byte) []int32 {
	ends := make([]int32, len(chunks))
	off := 0
	for i, c := range chunks {
		off += len(c)
		ends[i] = int32(off)
	}
	return ends
}

// TestResplitBody checks that cutting again only around an edit gives
// exactly SplitBody's chunks, for edits of every kind and place (at the
// start, at the end, within the first or last chunk, inserts that shift
// the rest, deletes, replacements, several edits at once, an unchanged
// body, a body shrunk to one chunk), on text and on random bytes, and
// that the chunks it says it kept are the old body's.
func TestResplitBody(t *testing.T) {
	type edit func(b []byte, seed uint64) []byte
	splice := func(at, del int, insert []byte) edit {
		return func(b []byte, _ uint64) []byte {
			at := min(max(at, 0), len(b))
			if at < 0 {
				at = 0
			}
			del := min(del, len(b)-at)
			return append(append(bytes.Clone(b[:at]), insert...), b[at+del:]...)
		}
	}
	edits := map[string]func(n int) edit{
		"insert at start":   func(int) edit { return splice(0, 0, []byte("hello ")) },
		"delete at start":   func(int) edit { return splice(0, 5, nil) },
		"append":            func(n int) edit { return splice(n, 0, []byte(" the end")) },
		"cut the end":       func(n int) edit { return splice(n-700, 700, nil) },
		"insert at 1000":    func(int) edit { return splice(1000, 0, []byte("x")) },
		"replace in middle": func(n int) edit { return splice(n/2, 3, []byte("abc")) },
		"delete in middle":  func(n int) edit { return splice(n/2, 40, nil) },
		"insert 20K":        func(n int) edit { return splice(n/3, 0, testText(20<<10, 9)) },
		"delete 20K":        func(n int) edit { return splice(n/3, 20<<10, nil) },
		"near the end":      func(n int) edit { return splice(n-30, 2, []byte("zz")) },
		"unchanged":         func(int) edit { return func(b []byte, _ uint64) []byte { return bytes.Clone(b) } },
		"to one chunk":      func(int) edit { return func(b []byte, _ uint64) []byte { return bytes.Clone(b[:300]) } },
		"two edits": func(n int) edit {
			return func(b []byte, s uint64) []byte {
				return splice(n/4, 10, []byte("first"))(splice(3*n/4, 0, []byte("second"))(b, s), s)
			}
		},
		"random": func(n int) edit {
			return func(b []byte, s uint64) []byte {
				r := testBytes(16, s)
				at := int(uint32(r[0])|uint32(r[1])<<8|uint32(r[2])<<16) % n
				return splice(at, int(r[3]%64), testText(int(r[4]%100), s))(b, s)
			}
		},
	}
	for _, kind := range []string{"text", "bytes"} {
		for _, n := range []int{600, 5 << 10, 100 << 10, 300 << 10} {
			for name, mk := range edits {
				for seed := range uint64(4) {
					var prev []byte
					if kind == "text" {
						prev = testText(n, seed)
					} else {
						prev = testBytes(n, seed)
					}
					n := len(prev)
					body := mk(n)(prev, seed+100)
					old := SplitBody(prev)
					got, was := resplitBody(prev, chunkEnds(old), body)
					want := SplitBody(body)
					if fmt.Sprint(chunkLens(got)) != fmt.Sprint(chunkLens(want)) || !bytes.Equal(bytes.Join(got, nil), body) {
						t.Fatalf("%s of %d bytes, %s, seed %d: chunks %v, SplitBody %v", kind, n, name, seed, chunkLens(got), chunkLens(want))
					}
					if len(was) != len(got) {
						t.Fatalf("%s, %s: %d chunks, %d origins", kind, name, len(got), len(was))
					}
					kept := 0
					for i, k := range was {
						if k >= 0 {
							kept++
							if !bytes.Equal(got[i], old[k]) {
								t.Fatalf("%s, %s: chunk %d is said to be old chunk %d, but differs", kind, name, i, k)
							}
						}
					}
					if name == "replace in middle" && n >= 100<<10 && kept < len(got)-4 {
						t.Fatalf("%s, %s: only %d of %d chunks kept", kind, name, kept, len(got))
					}
				}
			}
		}
	}
}
