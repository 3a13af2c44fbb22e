package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

// benchStore opens a store on disk in a temporary directory, with the
// default cache.
func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(Config{Dir: b.TempDir(), Partitions: testPartitions, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	return s
}

// BenchmarkItemAtOldVersion reads one item at a random old version of a
// project whose item was rewritten in every version: with 1k and with 100k
// versions. The read is a SeekGE on the item's MVCC entries (newest
// first), so its cost must not grow with the history (only with the LSM's
// depth): the 100k case should stay within 2x of the 1k case.
func BenchmarkItemAtOldVersion(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			s := benchStore(b)
			name := projectIn(0, testPartitions, 0)
			pm := newProject(testOrg, name)
			pm.chunkSize = 4096
			pm.forget = true
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			var recs []Record
			for v := 1; v <= n; v++ {
				vb := pm.next("main").put("notes", "doc", fmt.Sprintf(`{"v":%d}`, v), fmt.Sprintf(`{"text":"%s","v":%d}`, randText(rng, 200), v))
				if v == 1 {
					for i := range 20 {
						vb.put("notes", fmt.Sprintf("static-%02d", i), "", randText(rng, 300))
					}
				}
				vb.mutation("c1", uint64(v), "applied", "")
				recs = append(recs, vb.commit()...)
				if len(recs) >= 2000 || v == n {
					mustApply(b, s, 0, recs, int64(v))
					recs = recs[:0]
				}
			}
			// Old versions live in the LSM's lower levels, not in the
			// memtable, and no compaction competes with the reads.
			if err := s.db.Compact(context.Background(), partitionPrefix(0), prefixEnd(partitionPrefix(0)), true); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				v := 1 + uint64(rng.IntN(n-1))
				ref, body, ok, err := s.Item(testOrg, name, "main", "notes", "doc", v)
				if err != nil || !ok || ref.Version != v || len(body) == 0 {
					b.Fatalf("Item at %d = %+v %v %v", v, ref, ok, err)
				}
			}
		})
	}
}

// BenchmarkApplySmallVersion applies one version that writes one 1 KB
// item, with its chunk and one mutation, per Apply: on disk (each Apply
// is a synced commit) and in memory (the store's own CPU cost).
func BenchmarkApplySmallVersion(b *testing.B) {
	for _, fsName := range []string{"disk", "mem"} {
		b.Run("fs="+fsName, func(b *testing.B) {
			var s *Store
			if fsName == "disk" {
				s = benchStore(b)
			} else {
				s = newStore(b)
			}
			name := projectIn(0, testPartitions, 0)
			pm := newProject(testOrg, name)
			pm.chunkSize = 4096
			pm.forget = true
			rng := rand.New(rand.NewPCG(2, 2))
			v := 0
			for b.Loop() {
				b.StopTimer()
				v++
				recs := pm.next("main").put("notes", fmt.Sprintf("i%d", v%100), `{"k":1}`, randText(rng, 1024)).
					mutation("c1", uint64(v), "applied", "").commit()
				b.StartTimer()
				if err := s.Apply(0, recs, int64(v)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyLargeEdit applies versions that each edit a few bytes of
// a 300 KB body made of 2 KiB chunks, one version per Apply, as the
// sequencer applies the mix's large splices: the chunks around the edit
// are new, the others stored.
//
// The store does not sync (Config.NoSync): the disk's fsync would hide
// the work measured.
//
// checked is Apply, which hashes the new body from the first chunk that
// differs from the body before it; decided is ApplyDecided, which takes
// the hashes as its process's Decider computed them.
func BenchmarkApplyLargeEdit(b *testing.B) {
	b.Run("checked", func(b *testing.B) { benchmarkApplyLargeEdit(b, false) })
	b.Run("decided", func(b *testing.B) { benchmarkApplyLargeEdit(b, true) })
}

func benchmarkApplyLargeEdit(b *testing.B, decided bool) {
	s, err := Open(Config{Dir: b.TempDir(), Partitions: testPartitions, Logger: quiet, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	name := projectIn(0, testPartitions, 0)
	p := schemas.Partition(schemas.ProjectKey(testOrg, name), testPartitions)
	pm := newProject(testOrg, name)
	pm.chunkSize = 2048
	pm.forget = true
	rng := rand.New(rand.NewPCG(3, 4))
	body := make([]byte, 300<<10)
	for i := range body {
		body[i] = 'a' + byte(rng.IntN(26))
	}
	next := int64(0)
	applyFn := s.Apply
	if decided {
		applyFn = s.ApplyDecided
	}
	apply := func(recs []Record) {
		next += int64(len(recs))
		if err := applyFn(p, recs, next); err != nil {
			b.Fatal(err)
		}
	}
	apply(pm.next("main").put("docs", "d1", "", string(body)).commit())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		copy(body[rng.IntN(len(body)-8):], "an edit!")
		recs := pm.next("main").put("docs", "d1", "", string(body)).commit()
		b.StartTimer()
		apply(recs)
	}
}
