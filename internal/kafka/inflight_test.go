package kafka

import (
	"sync"
	"testing"
)

func TestInflight(t *testing.T) {
	f := NewInflight(3)
	if got := f.Partitions(); got != 3 {
		t.Fatalf("Partitions() = %d, want 3", got)
	}
	check := func(p int32, wantWriting, wantAcked int64) {
		t.Helper()
		if w, a := f.Load(p); w != wantWriting || a != wantAcked {
			t.Fatalf("Load(%d) = %d, %d; want %d, %d", p, w, a, wantWriting, wantAcked)
		}
	}
	check(1, 0, 0)
	f.Writing(1, 2)
	f.Writing(1, 1)
	check(1, 3, 0)
	f.Written(1, 1, 8) // the later push is acknowledged first
	check(1, 2, 8)
	f.Written(1, 2, 7) // an older end never moves acked back
	check(1, 0, 8)
	f.Writing(2, 4)
	f.Written(2, 4, 0) // failed: counted out, nothing acknowledged
	check(2, 0, 0)
	check(0, 0, 0)

	// Partitions out of range and a nil Inflight count nothing.
	f.Writing(3, 1)
	f.Writing(-1, 1)
	check(3, 0, 0)
	var none *Inflight
	none.Writing(0, 1)
	none.Written(0, 1, 5)
	if w, a := none.Load(0); w != 0 || a != 0 || none.Partitions() != 0 {
		t.Fatalf("nil Inflight: %d, %d, %d partitions", w, a, none.Partitions())
	}
}

func TestInflightConcurrent(t *testing.T) {
	f := NewInflight(1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 1000 {
				f.Writing(0, 1)
				f.Written(0, 1, int64(i*1000+j+1))
			}
		}()
	}
	wg.Wait()
	if w, a := f.Load(0); w != 0 || a != 8000 {
		t.Fatalf("after 8000 pushes: writing %d, acked %d; want 0, 8000", w, a)
	}
}
