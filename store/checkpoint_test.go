package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCheckpointRestore checkpoints partition 0 of one store in the middle
// of its changelog and restores it into another store that holds an
// older, diverging copy of partition 0 and data of partition 1: partition
// 0 becomes exactly the checkpoint's, byte for byte, with its offset, and
// survives a reopen; partition 1 is untouched; the rest of the changelog
// then applies on top to the same bytes as the store that never moved.
func TestCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, batches, want := sourceStore(t, filepath.Join(dir, "src"))
	defer src.Close()
	ckDir := filepath.Join(dir, "ck")
	off, ok, err := src.CheckpointPartition(0, ckDir)
	if err != nil || !ok || off != batches[79].next {
		t.Fatalf("CheckpointPartition = %d, %v, %v; want offset %d", off, ok, err, batches[79].next)
	}
	// Writes after the checkpoint are not in it.
	for _, b := range batches[80:] {
		mustApply(t, src, 0, b.recs, b.next)
	}

	dstDir := filepath.Join(dir, "dst")
	dst, wantOther := divergedStore(t, dstDir)
	ck, err := OpenCheckpoint(ckDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.RestorePartition(ctx, 0, ck)
	ck.Close()
	if err != nil || got != off {
		t.Fatalf("RestorePartition = %d, %v; want %d", got, err, off)
	}
	checkMoved(t, dst, dstDir, src, want, wantOther, off, batches[80:], "restored")
}

// TestCheckpointWithoutPartition: a checkpoint of a partition the store
// holds nothing of has no offset, and restoring it is refused.
func TestCheckpointWithoutPartition(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, nil, filepath.Join(dir, "s"))
	defer s.Close()
	if _, ok, err := s.CheckpointPartition(2, filepath.Join(dir, "ck")); err != nil || ok {
		t.Fatalf("CheckpointPartition of an empty partition = %v, %v; want no offset", ok, err)
	}
	ck, err := OpenCheckpoint(filepath.Join(dir, "ck"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if _, err := s.RestorePartition(context.Background(), 2, ck); err == nil {
		t.Fatal("RestorePartition of a checkpoint without the partition succeeded")
	}
}

// TestRestoreLeftoversRemoved: the tables of a restore interrupted by a
// crash are removed when the store is opened again.
func TestRestoreLeftoversRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s := openStore(t, nil, dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, restoreDirPrefix+"123")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "000000.sst"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, nil, dir)
	defer s.Close()
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the interrupted restore's directory is still there: %v", err)
	}
}

// TestExportIngest exports partition 0 of one store in the middle of its
// changelog and ingests the tables into another store that holds an
// older, diverging copy of partition 0 and data of partition 1: partition
// 0 becomes exactly the exported one, byte for byte, with its offset, and
// survives a reopen; partition 1 is untouched; the rest of the changelog
// then applies on top to the same bytes as the store that never moved.
// Tables that hold another partition's keys or another offset are refused
// before anything changes.
func TestExportIngest(t *testing.T) {
	smallTables(t)
	ctx := context.Background()
	dir := t.TempDir()
	src, batches, want := sourceStore(t, filepath.Join(dir, "src"))
	defer src.Close()
	paths, off, ok, err := src.ExportPartition(ctx, 0, filepath.Join(dir, "ex"))
	if err != nil || !ok || off != batches[79].next {
		t.Fatalf("ExportPartition = %d, %v, %v; want offset %d", off, ok, err, batches[79].next)
	}
	if len(paths) < 3 {
		t.Fatalf("%d tables; the test wants several", len(paths))
	}
	for _, b := range batches[80:] {
		mustApply(t, src, 0, b.recs, b.next)
	}

	dstDir := filepath.Join(dir, "dst")
	dst, wantOther := divergedStore(t, dstDir)
	before := scanPartition(t, dst, 0)

	// Refused, nothing changed: another offset; a table of partition 1.
	if err := dst.IngestPartition(ctx, 0, paths, off+1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("IngestPartition with another offset = %v; want ErrInvalid", err)
	}
	p1, _, _, err := dst.ExportPartition(ctx, 1, filepath.Join(dir, "ex1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.IngestPartition(ctx, 0, append(slices.Clone(paths), p1...), off); !errors.Is(err, ErrInvalid) {
		t.Fatalf("IngestPartition with a table of partition 1 = %v; want ErrInvalid", err)
	}
	if d := diffScans(scanPartition(t, dst, 0), before); d != "" {
		t.Fatalf("a refused ingest changed partition 0: %s", d)
	}

	if err := dst.IngestPartition(ctx, 0, paths, off); err != nil {
		t.Fatal(err)
	}
	checkMoved(t, dst, dstDir, src, want, wantOther, off, batches[80:], "ingested")
}

// TestExportTablesRepeat: tables depend on the partition's keys and
// values only. An export of an unchanged partition is the same files,
// byte for byte; after a few more versions, the tables of the key ranges
// that did not change are still the same files (content-defined
// boundaries), so a checkpoint does not upload them again.
func TestExportTablesRepeat(t *testing.T) {
	smallTables(t)
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, nil, filepath.Join(dir, "s"))
	defer s.Close()
	batches := crashChangelog(rand.New(rand.NewPCG(9, 1)), 130)
	for _, b := range batches[:120] {
		mustApply(t, s, 0, b.recs, b.next)
	}
	export := func(name string) map[string]bool {
		t.Helper()
		paths, _, ok, err := s.ExportPartition(ctx, 0, filepath.Join(dir, name))
		if err != nil || !ok {
			t.Fatalf("ExportPartition = %v, %v", ok, err)
		}
		sums := map[string]bool{}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			sums[fmt.Sprintf("%x", sha256.Sum256(data))] = true
		}
		return sums
	}
	a, b := export("a"), export("b")
	if !maps.Equal(a, b) {
		t.Fatal("two exports of the same partition differ")
	}
	for _, b := range batches[120:] {
		mustApply(t, s, 0, b.recs, b.next)
	}
	c := export("c")
	same := 0
	for sum := range c {
		if a[sum] {
			same++
		}
	}
	t.Logf("%d tables, %d of them unchanged after %d more batches", len(c), same, len(batches)-120)
	if same == 0 || same == len(c) {
		t.Fatalf("%d of %d tables unchanged; want some but not all", same, len(c))
	}
}

// smallTables makes exports cut tables of a few KiB, so that small
// partitions have many.
func smallTables(t *testing.T) {
	target, minT, maxT := exportTargetTable, exportMinTable, exportMaxTable
	exportTargetTable, exportMinTable, exportMaxTable = 16<<10, 1<<10, 64<<10
	t.Cleanup(func() { exportTargetTable, exportMinTable, exportMaxTable = target, minT, maxT })
}

// sourceStore opens a store at dir holding the first 80 of a changelog's
// 120 batches of partition 0; want is that partition's data. The other
// 40 are for the tail after a move.
func sourceStore(t *testing.T, dir string) (*Store, []changelogBatch, []kv) {
	t.Helper()
	batches := crashChangelog(rand.New(rand.NewPCG(7, 1)), 120)
	src := openStore(t, nil, dir)
	for _, b := range batches[:80] {
		mustApply(t, src, 0, b.recs, b.next)
	}
	return src, batches, scanPartition(t, src, 0)
}

// divergedStore opens a store at dir that holds data of partition 1 and
// an older copy of partition 0 from another changelog, for a restore of
// partition 0 to replace; wantOther is partition 1's data.
func divergedStore(t *testing.T, dir string) (*Store, []kv) {
	t.Helper()
	dst := openStore(t, nil, dir)
	other := newProject(testOrg, projectIn(1, testPartitions, 0))
	mustApply(t, dst, 1, other.next("main").put("c", "a", `{}`, `{"x":1}`).commit(), 5)
	wantOther := scanPartition(t, dst, 1)
	for _, b := range crashChangelog(rand.New(rand.NewPCG(8, 1)), 10) {
		mustApply(t, dst, 0, b.recs, b.next)
	}
	return dst, wantOther
}

// checkMoved checks a store (at dir) that received partition 0 from src
// at offset off: partition 0 is want, partition 1 is untouched, the
// offsets are off, and the same after a reopen; then tail applies on top
// to what src holds. It closes dst.
func checkMoved(t *testing.T, dst *Store, dir string, src *Store, want, wantOther []kv, off int64, tail []changelogBatch, how string) {
	t.Helper()
	check := func(s *Store) {
		t.Helper()
		if d := diffScans(scanPartition(t, s, 0), want); d != "" {
			t.Fatalf("%s partition 0 differs from the source's: %s", how, d)
		}
		if d := diffScans(scanPartition(t, s, 1), wantOther); d != "" {
			t.Fatalf("partition 1 changed: %s", d)
		}
		if o, ok, err := s.Offset(0); err != nil || !ok || o != off {
			t.Fatalf("Offset(0) = %d, %v, %v; want %d", o, ok, err, off)
		}
		if a, err := s.Applied(0); err != nil || a != off {
			t.Fatalf("Applied(0) = %d, %v; want %d", a, err, off)
		}
	}
	check(dst)
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = openStore(t, nil, dir)
	defer dst.Close()
	check(dst)
	for _, b := range tail {
		mustApply(t, dst, 0, b.recs, b.next)
	}
	if d := diffScans(scanPartition(t, dst, 0), scanPartition(t, src, 0)); d != "" {
		t.Fatalf("after the tail, the %s partition differs: %s", how, d)
	}
}
