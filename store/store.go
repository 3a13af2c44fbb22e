// Package store is Canon's state layer: a Pebble database that holds, per
// partition of canon.versions, every version of every project branch, a
// per-item MVCC index with a latest index, content-addressed item bodies
// (chunks and a manifest per body, within the project's namespace),
// mutation records, the last mutation id of each client, and the
// changelog offset the data corresponds to.
//
// The store is written only by Apply, which takes decoded changelog records
// and writes them together with the partition's next changelog offset in
// one synced batch, so the offset always matches the data, even after a
// crash. It can always be rebuilt from canon.versions. docs/store.md
// describes the key layout and what each query costs.
package store

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// DefaultCacheSize is the block cache size when Config.CacheSize is 0.
const DefaultCacheSize = 64 << 20

// Config configures a Store.
type Config struct {
	// Dir is the directory of the Pebble database; it is created if
	// missing. Required.
	Dir string
	// FS is the file system; nil means the operating system's. Tests pass
	// vfs.NewMem() or vfs.NewCrashableMem().
	FS vfs.FS
	// Partitions is the partition count of canon.versions. The store
	// computes a project's partition as
	// schemas.Partition(schemas.ProjectKey(org, project), Partitions) and
	// records the count on first open; opening it later with another count
	// fails (ErrPartitionCount), since every project may have moved. To
	// change the count, remove Dir and let the store rebuild from the
	// changelog. Required, > 0.
	Partitions int32
	// Logger receives Pebble's messages and the store's own; nil means
	// discarding them.
	Logger *slog.Logger
	// CacheSize is the size in bytes of Pebble's block cache; 0 means
	// DefaultCacheSize.
	CacheSize int64
	// NoSync makes Apply and RecordRejections commit without waiting for
	// the write-ahead log to reach the disk. The store is rebuilt from the
	// changelog, and each batch holds its records with the changelog
	// offset they end at, so a crash loses at most a suffix of batches
	// (Pebble's log keeps their order) that the next restore reads again
	// from canon.versions. Nothing is lost that Kafka acknowledged; what is
	// given up is that state read from this store before the crash can be
	// older after a restart until the restore caught up. Default false:
	// every batch is synced.
	NoSync bool

	// pebbleOptions, if set, adjusts Pebble's options (tests: small
	// memtables to force flushes).
	pebbleOptions func(*pebble.Options)
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("store: Dir is required")
	case c.Partitions <= 0:
		return fmt.Errorf("store: Partitions is %d: set it to the partition count of %s", c.Partitions, schemas.TopicVersions)
	case c.CacheSize < 0:
		return fmt.Errorf("store: CacheSize is %d: use 0 for the default (%d) or a positive size in bytes", c.CacheSize, DefaultCacheSize)
	}
	return nil
}

// Errors of the store. Apply's errors wrap one of the first five; errors
// of queries for something missing wrap ErrNotFound.
var (
	// ErrConflict: the changelog holds a version whose payload differs
	// from the one stored for the same (project, branch, version).
	ErrConflict = errors.New("two different payloads for one version")
	// ErrGap: a version does not follow its branch's head (or names a
	// base version the store does not have): records are missing or out of
	// order.
	ErrGap = errors.New("version does not follow the branch head")
	// ErrStateHash: a version's state hash differs from the one the store
	// computes from its own state: the changelog is corrupt or diverges.
	ErrStateHash = errors.New("state hash mismatch")
	// ErrWrongPartition: a record's project belongs to another partition.
	ErrWrongPartition = errors.New("record of another partition")
	// ErrInvalid: a record or an argument is malformed (bad name or hash,
	// missing chunk, size mismatch, deletion of a missing item ...).
	ErrInvalid = errors.New("invalid")
	// ErrNotFound: no such branch, version, body or chunk. It is
	// model.ErrNotFound, so the decider and the store agree.
	ErrNotFound = model.ErrNotFound
	// ErrCorrupt: stored data does not decode or does not match its hash.
	ErrCorrupt = errors.New("store corrupt")
	// ErrPartitionCount: the store was built for another partition count.
	ErrPartitionCount = errors.New("partition count differs from the store's")
)

// Store is Canon's Pebble store. Its methods are safe for concurrent use;
// Apply and DropPartition of one partition are serialized. Queries read
// committed data through a consistent snapshot.
type Store struct {
	db    *pebble.DB
	cfg   Config
	log   *slog.Logger
	parts []partitionState // per partition: its writers' lock and what Apply remembers
	// applied is, per partition, the offset the store holds the
	// changelog up to, for readers that wait for it (Applied, WaitApplied).
	applied []applied
}

var _ model.Reader = (*Store)(nil)

// Open opens or creates the store in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	size := cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	cache := pebble.NewCache(size)
	defer cache.Unref()
	opts := &pebble.Options{
		FS:                 cfg.FS,
		Cache:              cache,
		Logger:             pebbleLogger{log},
		FormatMajorVersion: pebble.FormatNewest,
		EventListener: &pebble.EventListener{
			// A block that fails its checksum is an error of the read
			// that found it (pebble.IsCorruptionError), for the caller
			// to handle: the sequencer restores the partition from
			// elsewhere (docs/checkpoints.md). Pebble's default with a
			// logger is Fatalf, which panics here: one corrupt table of
			// a restored checkpoint would crash the process.
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				log.Error("pebble: on-disk corruption", "path", info.Path, "err", info.Details)
			},
		},
	}
	// Most reads are point reads (heads, latest entries, chunks): a bloom
	// filter spares the sstables that do not hold the key.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	if cfg.pebbleOptions != nil {
		cfg.pebbleOptions(opts)
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", cfg.Dir, err)
	}
	removeRestoreLeftovers(cfg, log)
	s := &Store{db: db, cfg: cfg, log: log, parts: make([]partitionState, cfg.Partitions), applied: make([]applied, cfg.Partitions)}
	for p := range s.applied {
		s.applied[p].next.Store(-1)
	}
	if err := s.checkPartitionCount(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// checkPartitionCount records the partition count on first open and
// refuses another one later.
func (s *Store) checkPartitionCount() error {
	k := partitionsKey()
	v, closer, err := s.db.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := s.db.Set(k, encodeUint64(uint64(s.cfg.Partitions)), pebble.Sync); err != nil {
			return fmt.Errorf("record partition count in %s: %w", s.cfg.Dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read partition count in %s: %w", s.cfg.Dir, err)
	}
	n, err := decodeUint64(v, "partition count")
	_ = closer.Close()
	if err != nil {
		return err
	}
	if n != uint64(s.cfg.Partitions) {
		return fmt.Errorf("%w: the store in %s was built for %d partitions of %s, the configuration says %d; "+
			"projects move between partitions when the count changes, so remove %s to rebuild the store from the changelog",
			ErrPartitionCount, s.cfg.Dir, n, schemas.TopicVersions, s.cfg.Partitions, s.cfg.Dir)
	}
	return nil
}

// Close closes the database. No method may be called after it.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Partitions is the partition count the store was opened with.
func (s *Store) Partitions() int32 { return s.cfg.Partitions }

// PartitionOf returns the partition of a project.
func (s *Store) PartitionOf(org, project string) int32 {
	return schemas.Partition(schemas.ProjectKey(org, project), s.cfg.Partitions)
}

func (s *Store) checkPartition(p int32) error {
	if p < 0 || p >= s.cfg.Partitions {
		return fmt.Errorf("%w: partition %d is not in [0, %d)", ErrInvalid, p, s.cfg.Partitions)
	}
	return nil
}

// DropPartition deletes everything the store holds for a partition,
// including its offset, in one synced write: afterwards the partition is
// rebuilt from the start of the changelog. Other partitions are untouched.
func (s *Store) DropPartition(p int32) error {
	if err := s.checkPartition(p); err != nil {
		return err
	}
	ps := &s.parts[p]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.forget()
	start := partitionPrefix(p)
	// After the delete: a HasChunk that read a chunk before it does not
	// remember the answer.
	defer ps.forgetChunks()
	defer ps.forgetDeploys()
	if err := s.db.DeleteRange(start, prefixEnd(start), pebble.Sync); err != nil {
		return fmt.Errorf("drop partition %d: %w", p, err)
	}
	s.setApplied(p, 0)
	s.log.Info("store: dropped partition", "partition", p)
	return nil
}

// pebbleLogger sends Pebble's messages to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on unrecoverable invariant violations; it
// logs and panics rather than exiting the process behind the caller's
// back.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}

// writeOpts are the options of the commits of Apply and RecordRejections:
// see Config.NoSync.
func (s *Store) writeOpts() *pebble.WriteOptions {
	if s.cfg.NoSync {
		return pebble.NoSync
	}
	return pebble.Sync
}
