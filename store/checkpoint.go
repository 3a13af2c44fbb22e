package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// restoreTableSize is the size at which RestorePartition starts a new
// sstable: large enough that a partition is a few files, small enough that
// Pebble can place them in its levels without rewriting much.
const restoreTableSize = 128 << 20

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
	ps := &s.parts[p]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.forget()
	defer ps.forgetChunks()

	tmp, err := os.MkdirTemp(s.cfg.Dir, restoreDirPrefix)
	if err != nil {
		return 0, fmt.Errorf("restore partition %d: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	start := partitionPrefix(p)
	end := prefixEnd(start)
	paths, err := s.copySpan(ctx, ck.db, start, end, tmp)
	if err != nil {
		return 0, fmt.Errorf("restore partition %d: %w", p, err)
	}
	if _, err := s.db.IngestAndExcise(ctx, paths, nil, nil, pebble.KeyRange{Start: start, End: end}); err != nil {
		return 0, fmt.Errorf("restore partition %d: ingest the checkpoint's tables: %w", p, err)
	}
	// IngestAndExcise is durable through the manifest; the WAL holds
	// nothing of it to sync.
	s.setApplied(p, offset)
	s.log.Info("store: restored partition from a checkpoint", "partition", p, "offset", offset, "tables", len(paths))
	return offset, nil
}

// copySpan writes the keys of [start, end) of src into sstables in dir.
func (s *Store) copySpan(ctx context.Context, src *pebble.DB, start, end []byte, dir string) (paths []string, err error) {
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	wopts := sstable.WriterOptions{TableFormat: s.db.FormatMajorVersion().MaxTableFormat()}
	var w *sstable.Writer
	var size int64
	closeW := func() error {
		if w == nil {
			return nil
		}
		err := w.Close()
		w = nil
		return err
	}
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if w == nil || size >= restoreTableSize {
			if err := closeW(); err != nil {
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			path := filepath.Join(dir, fmt.Sprintf("%06d.sst", len(paths)))
			f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				return nil, err
			}
			w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts)
			paths, size = append(paths, path), 0
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("%w: read the checkpoint: %w", ErrCorrupt, err)
		}
		if err := w.Set(it.Key(), v); err != nil {
			return nil, err
		}
		size += int64(len(it.Key()) + len(v))
		n++
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("%w: read the checkpoint: %w", ErrCorrupt, err)
	}
	if err := closeW(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("the checkpoint holds no key of the partition")
	}
	return paths, nil
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
