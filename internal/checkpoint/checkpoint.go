// Package checkpoint keeps checkpoints of the store's partitions in object
// storage, so that a new owner, a read replica or a standby restores a
// partition from the newest checkpoint and reads only the changelog tail
// after it (docs/checkpoints.md).
//
// A checkpoint of partition p is Pebble's checkpoint of the store
// restricted to p's key range: a consistent set of immutable files. Files
// are stored once, named by the SHA-256 of their bytes, so a checkpoint
// uploads only what the bucket does not hold yet; a manifest names them
// with their sizes and checksums, the partition, the changelog offset the
// checkpoint reflects and the incarnation (Kafka topic id) of the
// changelog:
//
//	PREFIX/files/SHA256
//	PREFIX/manifests/TOPIC/PARTITION/OFFSET-gGENERATION-WRITER.json
//
// Manifests are never overwritten: their names hold the offset, the
// consumer group generation of the owner and a writer id unique to one
// process, and they are written with an if-not-exists precondition.
// Restores take the highest offset, then the highest generation. A zombie
// owner (one that lost the partition and has not noticed yet) can only
// add a manifest of a changelog prefix it saw committed, at an offset at
// most the newer owner's and of an older generation: a valid, older
// checkpoint, never a replacement of the newer one.
package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs: canon dev and tests
	_ "gocloud.dev/blob/s3blob"   // s3:// URLs: deployments

	"github.com/canon-sync/canon/store"
)

// Defaults of Config.
const (
	DefaultPrefix = "canon/"
	DefaultKeep   = 3
	DefaultGrace  = time.Hour
)

// Config configures a Bucket.
type Config struct {
	// URL is the bucket, as gocloud.dev/blob opens it: file:///path for a
	// local directory (add ?create_dir=1 to create it), or
	// s3://bucket?region=R for S3 (endpoint=http://host:port and
	// use_path_style=true for an S3-compatible server; credentials come
	// from the usual AWS environment). Required unless Bucket is set.
	URL string
	// Bucket, when set, is used instead of opening URL (tests).
	Bucket *blob.Bucket
	// Prefix is prepended to every object name; DefaultPrefix when empty.
	Prefix string
	// Store is the store checkpoints are taken of and restored into.
	Store *store.Store
	// Topic is the name of the changelog topic (canon.versions).
	Topic string
	// Keep is how many manifests per partition are retained, newest
	// offsets first; DefaultKeep when 0.
	Keep int
	// Grace protects a running restore from garbage collection: a
	// manifest beyond the Keep newest is deleted only once it has been out
	// of them for Grace, and a file no manifest names only once it was
	// seen unreferenced for Grace. A restore or a checkpoint upload that
	// takes longer than Grace may find its files gone (it then fails and
	// falls back, it never restores a partial checkpoint). DefaultGrace
	// when 0.
	Grace time.Duration
	// TempDir is where checkpoints are staged and downloaded; the store's
	// directory's parent is best (hard links are used where possible).
	// When set it must be private to the process: Open removes what an
	// interrupted checkpoint or restore left in it. The system's
	// temporary directory when empty (nothing is removed then).
	TempDir string
	// Log receives what happens; nil discards it.
	Log *slog.Logger
	// Metrics, when set, counts checkpoints, uploads and restores.
	Metrics *Metrics

	// now is the clock of retention; time.Now when nil (tests move it).
	now func() time.Time
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.URL == "" && c.Bucket == nil:
		return errors.New("checkpoint: no bucket: set --checkpoint-url (file:///dir or s3://bucket?region=R)")
	case c.Store == nil:
		return errors.New("checkpoint: Store is required")
	case c.Topic == "":
		return errors.New("checkpoint: Topic is required")
	case c.Keep < 0:
		return fmt.Errorf("checkpoint: Keep is %d: use 0 for the default (%d) or a positive count", c.Keep, DefaultKeep)
	case c.Grace < 0:
		return fmt.Errorf("checkpoint: Grace is %v: use 0 for the default (%v) or a positive duration", c.Grace, DefaultGrace)
	}
	return nil
}

// Bucket is the checkpoints of one changelog topic in one bucket. Its
// methods are safe for concurrent use on different partitions.
type Bucket struct {
	cfg    Config
	b      *blob.Bucket
	owned  bool // b was opened from cfg.URL
	log    *slog.Logger
	writer string // unique to this process

	state *bucketState
}

// Open opens the bucket of cfg.
func Open(ctx context.Context, cfg Config) (*Bucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, owned := cfg.Bucket, false
	if b == nil {
		var err error
		if b, err = blob.OpenBucket(ctx, cfg.URL); err != nil {
			return nil, fmt.Errorf("open checkpoint bucket %s (check --checkpoint-url): %w", redact(cfg.URL), err)
		}
		owned = true
	}
	if cfg.TempDir != "" {
		for _, pattern := range []string{takeDirPrefix + "*", restoreDirPrefix + "*"} {
			dirs, _ := filepath.Glob(filepath.Join(cfg.TempDir, pattern))
			for _, d := range dirs {
				_ = os.RemoveAll(d)
			}
		}
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &Bucket{cfg: cfg, b: b, owned: owned, log: log, writer: hex.EncodeToString(id[:]), state: newBucketState()}, nil
}

// Close closes the bucket if Open opened it.
func (k *Bucket) Close() error {
	if k.owned {
		return k.b.Close()
	}
	return nil
}

// redact drops a URL's query (it may hold credentials) for messages.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

// Prefixes of the directories Take and Restore stage files in.
const (
	takeDirPrefix    = "canon-checkpoint-"
	restoreDirPrefix = "canon-restore-"
)

// Manifest formats. ManifestFormat is the one this Canon writes; it
// reads both.
const (
	// formatPebbleCheckpoint (1): the files are a Pebble checkpoint of
	// the owner's whole store restricted to the partition (sstables that
	// may hold other partitions' keys, several values per key, the WAL,
	// Pebble's MANIFEST); a restore opens it and copies the partition's
	// keys into new tables.
	formatPebbleCheckpoint = 1
	// ManifestFormat (2): the files are the partition's own sstables,
	// in key order, each key once (store.ExportPartition); a restore
	// ingests them as they are.
	ManifestFormat = 2
)

// Manifest describes one checkpoint.
type Manifest struct {
	Format    int    `json:"format"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topicId"` // hex of the Kafka topic id: the changelog's incarnation
	Partition int32  `json:"partition"`
	// Offset is the next changelog offset the checkpoint holds: a restore
	// reads the tail from it.
	Offset int64 `json:"offset"`
	// Generation is the consumer group generation of the owner that
	// wrote it (-1 when not known), Writer its process.
	Generation int32     `json:"generation"`
	Writer     string    `json:"writer"`
	CreatedAt  time.Time `json:"createdAt"`
	Files      []File    `json:"files"`
}

// File is one file of a checkpoint.
type File struct {
	Name   string `json:"name"`   // its name in the checkpoint directory
	SHA256 string `json:"sha256"` // lowercase hex; the object is files/SHA256
	// CRC32C is the CRC-32C (Castagnoli) of the bytes, 8 lowercase hex
	// digits; absent in manifests of earlier versions. A restore checks
	// it instead of the SHA-256 when present (see checkFile).
	CRC32C string `json:"crc32c,omitempty"`
	Size   int64  `json:"size"`
}

func (k *Bucket) fileKey(sum string) string { return k.cfg.Prefix + "files/" + sum }

func (k *Bucket) manifestDir(p int32) string {
	return fmt.Sprintf("%smanifests/%s/%05d/", k.cfg.Prefix, k.cfg.Topic, p)
}

// manifestKey is OFFSET-gGENERATION-WRITER.json, both numbers zero-padded
// so that names sort as numbers do; an unknown generation (-1) is 0.
func (k *Bucket) manifestKey(m *Manifest) string {
	return fmt.Sprintf("%s%020d-g%010d-%s.json", k.manifestDir(m.Partition), m.Offset, max(m.Generation, 0), m.Writer)
}

// manifestRef is a manifest listed in the bucket.
type manifestRef struct {
	key        string
	offset     int64
	generation int32
	modTime    time.Time
}

// parseManifestKey reads the offset and the generation of a manifest's
// name. (Manifests of earlier versions have an unpadded generation.)
func parseManifestKey(key string) (offset int64, generation int32, ok bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	if !strings.HasSuffix(base, ".json") {
		return 0, 0, false
	}
	digits, rest, ok := strings.Cut(base, "-")
	if !ok {
		return 0, 0, false
	}
	o, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || o < 0 {
		return 0, 0, false
	}
	gen, _, ok := strings.Cut(rest, "-")
	if !ok || !strings.HasPrefix(gen, "g") {
		return 0, 0, false
	}
	g, err := strconv.ParseInt(gen[1:], 10, 32)
	if err != nil || g < 0 {
		return 0, 0, false
	}
	return o, int32(g), true
}

// list returns the manifests under prefix, newest offset first.
func (k *Bucket) list(ctx context.Context, prefix string) ([]manifestRef, error) {
	var out []manifestRef
	it := k.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, errEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list checkpoint manifests under %s: %w", prefix, err)
		}
		if obj.IsDir {
			continue
		}
		o, g, ok := parseManifestKey(obj.Key)
		if !ok {
			continue
		}
		out = append(out, manifestRef{key: obj.Key, offset: o, generation: g, modTime: obj.ModTime})
	}
	sortRefs(out)
	return out, nil
}

// readManifest reads and checks a manifest.
func (k *Bucket) readManifest(ctx context.Context, ref manifestRef) (*Manifest, error) {
	if m := k.state.manifest(ref.key); m != nil {
		return m, nil
	}
	data, err := k.b.ReadAll(ctx, ref.key)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", ref.key, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest %s does not decode (truncated?): %w", ErrInvalid, ref.key, err)
	}
	switch {
	case m.Format != ManifestFormat && m.Format != formatPebbleCheckpoint:
		return nil, fmt.Errorf("%w: manifest %s has format %d, this Canon reads %d and %d", ErrInvalid, ref.key, m.Format, formatPebbleCheckpoint, ManifestFormat)
	case m.Offset != ref.offset:
		return nil, fmt.Errorf("%w: manifest %s says offset %d, its name %d", ErrInvalid, ref.key, m.Offset, ref.offset)
	case max(m.Generation, 0) != ref.generation:
		return nil, fmt.Errorf("%w: manifest %s says generation %d, its name %d", ErrInvalid, ref.key, m.Generation, ref.generation)
	case len(m.Files) == 0:
		return nil, fmt.Errorf("%w: manifest %s names no file", ErrInvalid, ref.key)
	}
	names := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if names[f.Name] {
			return nil, fmt.Errorf("%w: manifest %s names file %q twice", ErrInvalid, ref.key, f.Name)
		}
		names[f.Name] = true
		if len(f.SHA256) != 64 || strings.ContainsAny(f.Name, `/\`) || f.Name == "" || f.Name[0] == '.' || f.Size < 0 {
			return nil, fmt.Errorf("%w: manifest %s names a bad file %q (%s)", ErrInvalid, ref.key, f.Name, f.SHA256)
		}
		if _, err := hex.DecodeString(f.SHA256); err != nil {
			return nil, fmt.Errorf("%w: manifest %s names a bad file hash %q", ErrInvalid, ref.key, f.SHA256)
		}
		if _, err := hex.DecodeString(f.CRC32C); err != nil || (f.CRC32C != "" && len(f.CRC32C) != 8) {
			return nil, fmt.Errorf("%w: manifest %s names a bad file checksum %q", ErrInvalid, ref.key, f.CRC32C)
		}
	}
	k.state.rememberManifest(ref.key, &m)
	return &m, nil
}

// Errors of checkpoints.
var (
	// ErrExists: a manifest of the same name is in the bucket already
	// (the same writer checkpointed the same offset in the same
	// generation); manifests are never overwritten.
	ErrExists = errors.New("checkpoint manifest exists")
	// ErrInvalid: a manifest or a file of a checkpoint is missing,
	// truncated, corrupt or of another changelog incarnation; the restore
	// skips the checkpoint.
	ErrInvalid = errors.New("invalid checkpoint")
)
