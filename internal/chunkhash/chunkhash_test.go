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

// Sum over a chain of edited bodies is the SHA-256 of each, and it
// resumes (shares the states of the body before) when they start alike.
func TestSumResumes(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	body := make([]byte, 300<<10)
	for i := range body {
		body[i] = byte(rnd.IntN(256))
	}
	var prev []byte
	var marks *Marks
	resumed := 0
	for step := range 200 {
		sum, m, err := Sum(body, prev, marks)
		if err != nil {
			t.Fatal(err)
		}
		if sum != sha256.Sum256(body) {
			t.Fatalf("step %d: wrong sum (%d bytes)", step, len(body))
		}
		if (m == nil) != (len(body) < 2*MarkEvery) {
			t.Fatalf("step %d: %d bytes, marks %v", step, len(body), m != nil)
		}
		if m != nil && len(m.states) != len(body)/MarkEvery {
			t.Fatalf("step %d: %d marks for %d bytes", step, len(m.states), len(body))
		}
		if m != nil && marks != nil && len(m.states) > 0 && len(marks.states) > 0 && &m.states[0][0] == &marks.states[0][0] {
			resumed++
		}
		// The next body: a few bytes inserted, removed or changed.
		next := append([]byte(nil), body...)
		at := rnd.IntN(len(next))
		switch rnd.IntN(8) {
		case 0:
			next = next[:at]
		case 1:
			next = append(next[:at], next[min(len(next), at+rnd.IntN(100)):]...)
		case 2:
			next[at] ^= 1
		case 3:
			next = next[:min(len(next), rnd.IntN(2*MarkEvery+1))]
		default:
			next = append(next[:at:at], append([]byte("inserted"), body[at:]...)...)
		}
		for len(next) < 100<<10 && rnd.IntN(3) > 0 {
			next = append(next, body[:rnd.IntN(len(body)+1)]...)
		}
		prev, marks, body = body, m, next
	}
	if resumed < 100 {
		t.Fatalf("%d of 200 sums resumed", resumed)
	}
}

// BenchmarkSum hashes the next version of a 300 KB body edited at a
// random place: whole, or resumed from the marks of the version before.
func BenchmarkSum(b *testing.B) {
	rnd := rand.New(rand.NewPCG(9, 10))
	bodies := make([][]byte, 64)
	bodies[0] = make([]byte, 300<<10)
	for i := range bodies[0] {
		bodies[0][i] = 'a' + byte(rnd.IntN(26))
	}
	for i := 1; i < len(bodies); i++ {
		at := rnd.IntN(len(bodies[i-1]))
		bodies[i] = append(append(bodies[i-1][:at:at], "edit"...), bodies[i-1][at:]...)
	}
	marks := make([]*Marks, len(bodies))
	for i := range bodies {
		_, marks[i], _ = Sum(bodies[i], nil, nil)
	}
	for _, resume := range []bool{false, true} {
		b.Run(map[bool]string{false: "whole", true: "resume"}[resume], func(b *testing.B) {
			b.SetBytes(300 << 10)
			b.ReportAllocs()
			for i := range b.N {
				j := 1 + i%(len(bodies)-1)
				if resume {
					_, _, _ = Sum(bodies[j], bodies[j-1], marks[j-1])
				} else {
					_ = sha256.Sum256(bodies[j])
				}
			}
		})
	}
}
