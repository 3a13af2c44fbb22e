package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A reader that saw a changelog record elsewhere waits for the store to
// hold it: WaitApplied returns once Apply committed past it, Applied
// agrees with Offset (also after a reopen and a drop), and a wait that
// cannot be met ends with its context.
func TestWaitApplied(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "db")
	if next, err := s.Applied(3); err != nil || next != 0 {
		t.Fatalf("empty store: %d, %v; want 0", next, err)
	}
	pm := newProject(testOrg, projectIn(3, testPartitions, 0))
	recs := pm.next("main").put("t", "1", `{}`, `1`).mutation("c", 1, "applied", "").commit()

	done := make(chan error, 1)
	go func() { done <- s.WaitApplied(context.Background(), 3, int64(len(recs))) }()
	mustApply(t, s, 3, recs, int64(len(recs)))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Versions(testOrg, pm.project, "main", 1, 1); err != nil {
		t.Fatal(err)
	}
	if next, err := s.Applied(3); err != nil || next != int64(len(recs)) {
		t.Fatalf("after Apply: %d, %v; want %d", next, err, len(recs))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.WaitApplied(ctx, 3, int64(len(recs))+1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the changelog: %v, want the context's deadline", err)
	}
	if err := s.WaitApplied(context.Background(), 3, 1); err != nil {
		t.Fatalf("wait for what the store holds: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, fs, "db")
	defer s.Close()
	if next, err := s.Applied(3); err != nil || next != int64(len(recs)) {
		t.Fatalf("after a reopen: %d, %v; want %d", next, err, len(recs))
	}
	if err := s.DropPartition(3); err != nil {
		t.Fatal(err)
	}
	if next, err := s.Applied(3); err != nil || next != 0 {
		t.Fatalf("after a drop: %d, %v; want 0", next, err)
	}
	if _, err := s.Applied(testPartitions); err == nil {
		t.Fatal("a partition out of range has a position")
	}
}
