package store

import "testing"

// The store keeps the highest source offset of the versions it applied
// per partition, in the same batch: a restored sequencer reads it with
// one point read.
func TestLastSource(t *testing.T) {
	s := newStore(t)
	if _, ok, err := s.LastSource(2); err != nil || ok {
		t.Fatalf("empty store: %v, %v", ok, err)
	}
	pm := newProject(testOrg, projectIn(2, testPartitions, 0))
	v1 := pm.next("main").put("t", "1", `{}`, `1`).mutation("c", 1, "applied", "")
	v1.v.Source.Offset = 40
	recs := v1.commit()
	v2 := pm.next("main").put("t", "2", `{}`, `2`).mutation("c", 2, "applied", "")
	v2.v.Source.Offset = 41
	recs = append(recs, v2.commit()...)
	mustApply(t, s, 2, recs, int64(len(recs)))
	if got, ok, err := s.LastSource(2); err != nil || !ok || got != 41 {
		t.Fatalf("after two versions: %d, %v, %v; want 41", got, ok, err)
	}
	// Applying the same records again (a restore that overlaps) keeps it.
	mustApply(t, s, 2, recs[len(recs)-1:], int64(len(recs)))
	if got, _, _ := s.LastSource(2); got != 41 {
		t.Fatalf("after a re-apply: %d, want 41", got)
	}
	if _, ok, _ := s.LastSource(1); ok {
		t.Fatal("another partition has a source offset")
	}
	if err := s.DropPartition(2); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LastSource(2); ok {
		t.Fatal("the source offset survived DropPartition")
	}
}
