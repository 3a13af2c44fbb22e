package chunkhash

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// A chain of edited bodies: each starts with some chunks of the one
// before it. Every sum is the SHA-256 of the whole body, whether it
// resumed or not, and a body that shares Every chunks or more resumes.
func TestResumedSumsAreTheBodysHash(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	chunkData := map[int][]byte{}
	newChunk := func() int {
		id := len(chunkData)
		d := make([]byte, 1+rnd.IntN(3000))
		for i := range d {
			d[i] = byte(rnd.IntN(256))
		}
		chunkData[id] = d
		return id
	}
	var body []int
	for range 40 {
		body = append(body, newChunk())
	}
	var prev *Checked[int]
	resumed := 0
	for step := range 300 {
		hs, err := New(body, prev)
		if err != nil {
			t.Fatal(err)
		}
		same := 0
		if prev != nil {
			for same < len(prev.Chunks) && same < len(body) && prev.Chunks[same] == body[same] {
				same++
			}
		}
		if len(body) >= 2*Every && hs.Start != same/Every*Every {
			t.Fatalf("step %d: %d chunks in common, resumed at chunk %d", step, same, hs.Start)
		}
		if hs.Start > 0 {
			resumed++
		}
		var whole []byte
		for i, c := range body {
			whole = append(whole, chunkData[c]...)
			if i >= hs.Start {
				if err := hs.Write(chunkData[c]); err != nil {
					t.Fatal(err)
				}
			}
		}
		sum, checked := hs.Sum()
		if sum != sha256.Sum256(whole) {
			t.Fatalf("step %d (resumed at chunk %d of %d): wrong sum", step, hs.Start, len(body))
		}
		if hs.Size != int64(len(whole)) {
			t.Fatalf("step %d: size %d, body %d bytes", step, hs.Size, len(whole))
		}
		if (checked == nil) != (len(body) < 2*Every) {
			t.Fatalf("step %d: %d chunks, kept %v", step, len(body), checked != nil)
		}
		if checked != nil {
			prev = checked
		}
		// The next body: an edit of this one from a random chunk on,
		// sometimes a new body, sometimes shorter or longer.
		cut := rnd.IntN(len(body) + 1)
		next := append([]int(nil), body[:cut]...)
		switch rnd.IntN(20) {
		case 0:
			next = nil
		case 1:
			next = next[:min(len(next), rnd.IntN(2*Every))]
		}
		for range 1 + rnd.IntN(3) {
			next = append(next, newChunk())
		}
		if cut < len(body) && rnd.IntN(5) != 0 {
			next = append(next, body[cut+1:]...)
		}
		for len(next) < 2*Every && rnd.IntN(2) == 0 {
			next = append(next, newChunk())
		}
		body = next
	}
	if resumed < 100 {
		t.Fatalf("only %d of 300 bodies resumed their hash", resumed)
	}
}

// A body with the same first chunks as a checked one but different bytes
// after them is not taken for it.
func TestResumeChecksTheRest(t *testing.T) {
	chunks := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	data := func(c string) []byte { return bytes.Repeat([]byte(c), 100) }
	hs, _ := New(chunks, nil)
	for _, c := range chunks {
		_ = hs.Write(data(c))
	}
	_, prev := hs.Sum()
	other := append(append([]string(nil), chunks[:5]...), "x", "y", "z", "w")
	hs, _ = New(other, prev)
	if hs.Start != Every {
		t.Fatalf("resumed at %d, want %d", hs.Start, Every)
	}
	var whole []byte
	for i, c := range other {
		whole = append(whole, data(c)...)
		if i >= hs.Start {
			_ = hs.Write(data(c))
		}
	}
	if sum, _ := hs.Sum(); sum != sha256.Sum256(whole) {
		t.Fatal("wrong sum after resuming")
	}
}
