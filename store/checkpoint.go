package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// CheckpointPartition writes a Pebble checkpoint of the store into dir,
// which must not exist, restricted to partition p: every file that holds
// a key of p is in it, with the WAL (so recent writes are too). Files
// outside the partition's key range may hold other partitions' keys;
// RestorePartition reads only p's. It returns the partition's offset as
// the checkpoint holds it (read back from the checkpoint itself, so it
// matches the data exactly); ok is false when the checkpoint holds
// nothing of p.
//
// The files of a checkpoint are hard links to the store's immutable
// sstables where the file system allows it, so taking one is cheap; the
// caller removes dir when it is done with it. Checkpoints need the
// operating system's file system (Config.FS nil).
func (s *Store) CheckpointPartition(p int32, dir string) (offset int64, ok bool, err error) {
	if err := s.checkPartition(p); err != nil {
		return 0, false, err
	}
	if s.cfg.FS != nil && s.cfg.FS != vfs.Default {
		return 0, false, fmt.Errorf("%w: checkpoints need the operating system's file system", ErrInvalid)
	}
	start := partitionPrefix(p)
	span := pebble.CheckpointSpan{Start: start, End: prefixEnd(start)}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL(), pebble.WithRestrictToSpans([]pebble.CheckpointSpan{span})); err != nil {
		return 0, false, fmt.Errorf("checkpoint partition %d into %s: %w", p, dir, err)
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return 0, false, err
	}
	defer ck.Close()
	return ck.Offset(p)
}

// Checkpoint is a Pebble checkpoint opened read-only: what
// CheckpointPartition wrote, or its files downloaded again.
type Checkpoint struct {
	db *pebble.DB
}

// OpenCheckpoint opens the checkpoint in dir read-only. A checkpoint whose
// files are missing or corrupt fails here (or when RestorePartition reads
// it).
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleLogger{discardLog}, FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		return nil, fmt.Errorf("%w: open checkpoint in %s: %w", ErrCorrupt, dir, err)
	}
	return &Checkpoint{db: db}, nil
}

// Close closes the checkpoint.
func (c *Checkpoint) Close() { _ = c.db.Close() }

// Offset is the next changelog offset of partition p the checkpoint holds.
func (c *Checkpoint) Offset(p int32) (int64, bool, error) {
	o, ok, err := getOffset(c.db, offsetKey(p))
	if err != nil {
		return 0, false, fmt.Errorf("%w: read offset of partition %d in the checkpoint: %w", ErrCorrupt, p, err)
	}
	return o, ok, nil
}

// RestorePartition replaces everything the store holds of partition p
// with what the checkpoint holds of it, and returns the partition's
// offset from the checkpoint. The partition's keys are copied into new
// sstables under the store's directory and ingested with an excise of the
// partition's key range: the old data goes and the new comes in one
// atomic step, so a crash leaves either the old partition or the
// checkpoint's, each with its own offset. Other partitions are untouched.
// The checkpoint must hold an offset for p (ErrInvalid otherwise).
//
// The copy reads every key of the partition: its cost grows with the
// history. IngestPartition, over tables ExportPartition wrote, does not
// copy.
func (s *Store) RestorePartition(ctx context.Context, p int32, ck *Checkpoint) (offset int64, err error) {
	if err := s.checkPartition(p); err != nil {
		return 0, err
	}
	offset, ok, err := ck.Offset(p)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: the checkpoint holds no offset of partition %d", ErrInvalid, p)
	}
	tmp, err := os.MkdirTemp(s.cfg.Dir, restoreDirPrefix)
	if err != nil {
		return 0, fmt.Errorf("restore partition %d: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	start := partitionPrefix(p)
	paths, _, err := copySpan(ctx, ck.db, start, prefixEnd(start), tmp, s.db.FormatMajorVersion().MaxTableFormat())
	if err != nil {
		return 0, fmt.Errorf("restore partition %d: %w", p, err)
	}
	if err := s.ingestPartition(ctx, p, paths, offset); err != nil {
		return 0, err
	}
	return offset, nil
}

// ExportPartition writes what the store holds of partition p now into
// sstables in dir (created; it must not exist), in key order, each key
// once with its value: tables IngestPartition can ingest as they are,
// with no copy. It returns their paths and the partition's offset, read
// from the same snapshot as the keys; ok is false when the store holds
// nothing of p.
//
// The export reads every key of the partition (it is a checkpoint's cost,
// paid by the owner in the background, so that a restore does not pay
// it). Its table boundaries depend on the keys only (content-defined, see
// exportCut), and a table's bytes on its keys and values only: the tables
// of a key range that did not change since the last export are the same
// files again, with the same checksums.
func (s *Store) ExportPartition(ctx context.Context, p int32, dir string) (paths []string, offset int64, ok bool, err error) {
	if err := s.checkPartition(p); err != nil {
		return nil, 0, false, err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	offset, ok, err = getOffset(snap, offsetKey(p))
	if err != nil || !ok {
		return nil, 0, false, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, 0, false, fmt.Errorf("export partition %d: %w", p, err)
	}
	start := partitionPrefix(p)
	paths, _, err = copySpan(ctx, snap, start, prefixEnd(start), dir, s.db.FormatMajorVersion().MaxTableFormat())
	if err != nil {
		return nil, 0, false, fmt.Errorf("export partition %d: %w", p, err)
	}
	return paths, offset, true, nil
}

// IngestPartition replaces everything the store holds of partition p
// with the tables at paths, which ExportPartition wrote (downloaded again:
// the caller has checked their bytes), and which must hold offset as the
// partition's offset. The tables are ingested as they are, with an
// excise of the partition's key range: the old data goes and the new
// comes in one atomic step, and nothing is copied when paths are on the
// store's file system (they are hard-linked; the caller may remove them
// afterwards). Other partitions are untouched.
//
// Before anything changes, every table is checked to hold only keys of p
// and the partition's offset key to be offset (ErrInvalid otherwise).
func (s *Store) IngestPartition(ctx context.Context, p int32, paths []string, offset int64) error {
	if err := s.checkPartition(p); err != nil {
		return err
	}
	if s.cfg.FS != nil && s.cfg.FS != vfs.Default {
		return fmt.Errorf("%w: ingesting tables needs the operating system's file system", ErrInvalid)
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: no table to ingest for partition %d", ErrInvalid, p)
	}
	start := partitionPrefix(p)
	end := prefixEnd(start)
	found := false
	for _, path := range paths {
		o, has, err := checkTable(ctx, path, start, end, offsetKey(p))
		if err != nil {
			return fmt.Errorf("%w: table %s of partition %d: %w", ErrInvalid, filepath.Base(path), p, err)
		}
		if has {
			if o != offset {
				return fmt.Errorf("%w: the tables hold offset %d of partition %d, expected %d", ErrInvalid, o, p, offset)
			}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%w: the tables hold no offset of partition %d", ErrInvalid, p)
	}
	return s.ingestPartition(ctx, p, paths, offset)
}

// ingestPartition ingests tables of partition p's keys with an excise of
// the partition's range, and sets the partition's offset.
func (s *Store) ingestPartition(ctx context.Context, p int32, paths []string, offset int64) error {
	start := partitionPrefix(p)
	end := prefixEnd(start)
	ps := &s.parts[p]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.forget()
	defer ps.forgetChunks()
	if _, err := s.db.IngestAndExcise(ctx, paths, nil, nil, pebble.KeyRange{Start: start, End: end}); err != nil {
		return fmt.Errorf("restore partition %d: ingest the checkpoint's tables: %w", p, err)
	}
	// IngestAndExcise is durable through the manifest; the WAL holds
	// nothing of it to sync.
	s.setApplied(p, offset)
	s.log.Info("store: restored partition from a checkpoint", "partition", p, "offset", offset, "tables", len(paths))
	return nil
}

// checkTable checks that the sstable at path holds only keys in
// [start, end), and returns the value of offsetKey as an offset if it
// holds it.
func checkTable(ctx context.Context, path string, start, end, offsetKey []byte) (offset int64, has bool, err error) {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return 0, false, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return 0, false, err
	}
	r, err := sstable.NewReader(ctx, readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return 0, false, err
	}
	defer r.Close()
	it, err := r.NewPointIter(ctx, sstable.IterOptions{})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	first, last := it.First(), it.Last()
	switch {
	case first == nil || last == nil:
		return 0, false, errors.New("it holds no key")
	case bytes.Compare(first.K.UserKey, start) < 0 || bytes.Compare(last.K.UserKey, end) >= 0:
		return 0, false, errors.New("it holds keys of another partition")
	}
	kv := it.SeekGE(offsetKey, 0)
	if kv == nil || !bytes.Equal(kv.K.UserKey, offsetKey) {
		return 0, false, it.Error()
	}
	v, _, err := kv.Value(nil)
	if err != nil {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("an offset of %d bytes", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// Table sizes of copySpan. Where an export cuts its tables decides
// which tables a checkpoint uploads again: a table is uploaded unless the
// bucket holds one with the same bytes, so a cut must not move when keys
// elsewhere in the partition change. Cuts therefore depend on each
// entry alone, never on where the table or the export started:
//
//   - a table holds one kind of key (one key family: versions, item
//     entries, chunks, mutations, ...): the families change at different
//     rates, and versions and mutations are only appended to, at the end
//     of each branch's and each client's range, so their tables other
//     than the last of each range stay the same;
//   - within a family a table may end after an entry with probability
//     (its key's and value's bytes) / exportTargetTable, decided by a
//     hash of its key: tables of exportTargetTable bytes on average,
//     whatever the sizes of the entries, and a cut that moves only when
//     that entry is added, removed or resized (a move merges or splits
//     the tables on either side of it, no others);
//   - exportMinTable and exportMaxTable bound the sizes (a cut below the
//     minimum is skipped, at the maximum a table ends anyway): these are
//     the only cuts that depend on the table's start, and they are rare.
//
// A few MiB per table keep a change to a few versions a few MiB to
// upload, and a partition of 1M versions some hundred files, which a
// restore downloads in parallel and Pebble ingests in one step.
// (Variables so that tests make many small tables.)
var (
	exportTargetTable int64 = 4 << 20
	exportMinTable    int64 = 256 << 10
	exportMaxTable    int64 = 32 << 20
)

// exportCut reports whether a table may end after an entry of key with
// size bytes (key and value).
func exportCut(key []byte, size int64) bool {
	if size >= exportTargetTable {
		return true
	}
	return xxhash.Sum64(key) < uint64(size)*(math.MaxUint64/uint64(exportTargetTable))
}

// keyKind is the kind byte of a key of a partition (keys.go), 0 for a
// key too short to have one.
func keyKind(key []byte) byte {
	if len(key) <= 4 {
		return 0
	}
	return key[4]
}

// copySpan writes the keys of [start, end) of src into sstables in dir,
// in order, and returns their paths and how many keys it wrote. Keys are
// written with sequence number zero, one value per key (src's visible
// one), as Pebble ingests them.
func copySpan(ctx context.Context, src pebble.Reader, start, end []byte, dir string, format sstable.TableFormat) (paths []string, n int, err error) {
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	wopts := sstable.WriterOptions{TableFormat: format}
	var w *sstable.Writer
	var size int64
	var kind byte // of the table's keys
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		if w != nil && keyKind(it.Key()) != kind {
			err := w.Close()
			w = nil
			if err != nil {
				return nil, 0, err
			}
		}
		if w == nil {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
			path := filepath.Join(dir, fmt.Sprintf("%06d.sst", len(paths)))
			f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				return nil, 0, err
			}
			w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts)
			paths, size, kind = append(paths, path), 0, keyKind(it.Key())
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, 0, fmt.Errorf("%w: read the partition: %w", ErrCorrupt, err)
		}
		if err := w.Set(it.Key(), v); err != nil {
			return nil, 0, err
		}
		entry := int64(len(it.Key()) + len(v))
		size += entry
		n++
		if size >= exportMaxTable || (size >= exportMinTable && exportCut(it.Key(), entry)) {
			err := w.Close()
			w = nil
			if err != nil {
				return nil, 0, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, 0, fmt.Errorf("%w: read the partition: %w", ErrCorrupt, err)
	}
	if w != nil {
		err := w.Close()
		w = nil
		if err != nil {
			return nil, 0, err
		}
	}
	if n == 0 {
		return nil, 0, errors.New("no key of the partition")
	}
	return paths, n, nil
}

var discardLog = slog.New(slog.DiscardHandler)

// restoreDirPrefix names the directories RestorePartition writes its
// tables in, inside the store's directory so that ingesting them links
// rather than copies.
const restoreDirPrefix = "restore-"

// removeRestoreLeftovers removes what a RestorePartition interrupted by a
// crash left in the store's directory; the partition itself is whole
// (the old one or the checkpoint's).
func removeRestoreLeftovers(cfg Config, log *slog.Logger) {
	if cfg.FS != nil && cfg.FS != vfs.Default {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(cfg.Dir, restoreDirPrefix+"*"))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			log.Warn("store: remove an interrupted restore's tables", "dir", d, "err", err)
		}
	}
}
