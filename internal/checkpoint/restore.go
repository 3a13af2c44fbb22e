package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"

	"github.com/canon-sync/canon/store"
)

// Restore replaces partition p of the store with the newest valid
// checkpoint of changelog incarnation topicID whose offset is in
// (after, upTo], and returns its offset; ok is false when there is none.
// after is what the caller holds already (-1 for nothing); upTo is the
// changelog's last stable offset (a checkpoint beyond it is of another
// incarnation or of records not committed: never used).
//
// Every file is checked against the manifest's size and SHA-256 while it
// is downloaded, and the checkpoint's own offset against the manifest's.
// A checkpoint that is missing, truncated, corrupt or of another topic
// incarnation is logged and skipped for the next older one: what Restore
// restores is exactly a checkpoint an owner wrote. It returns an error
// only when the bucket cannot be listed or ctx ends; the store's
// partition is then untouched.
func (k *Bucket) Restore(ctx context.Context, p int32, topicID string, after, upTo int64) (offset int64, ok bool, err error) {
	offset, ok, _, err = k.restore(ctx, p, topicID, after, upTo, false)
	return offset, ok, err
}

// RestoreUnchecked is Restore that may return before every restored file
// is checked against its checksum, so that the check runs while the
// caller reads the changelog's tail and uses the partition: the files
// linked from a local bucket (file:// on the store's file system) are
// checked by check, which starts the check when it is first called (not
// before: it would compete with the restore for the CPU) and waits for
// it. The caller must call check once, even when it drops the partition:
// the check holds the files open until it ran. On an error (ErrInvalid, logged
// here) the store holds a corrupt checkpoint: the caller must drop the
// partition and restore it another way, and this Bucket's restores skip
// that manifest from then on. Everything else is checked before
// RestoreUnchecked returns, as Restore does.
//
// Until check returned, reads are guarded by Pebble: the ingest read
// each table's footer, properties, index and first and last data block,
// each checked against its own checksum, and every block read later is
// checked when it is read, so a corrupt block is an error, never wrong
// data (docs/checkpoints.md). What only check finds is a table swapped
// for another valid one, and corruption in blocks nobody read yet.
// check is nil when nothing is left to check; it may be called once.
func (k *Bucket) RestoreUnchecked(ctx context.Context, p int32, topicID string, after, upTo int64) (offset int64, ok bool, check func(context.Context) error, err error) {
	return k.restore(ctx, p, topicID, after, upTo, true)
}

func (k *Bucket) restore(ctx context.Context, p int32, topicID string, after, upTo int64, deferCheck bool) (offset int64, ok bool, check func(context.Context) error, err error) {
	start := time.Now()
	refs, err := k.list(ctx, k.manifestDir(p))
	if err != nil {
		return 0, false, nil, err
	}
	for _, ref := range refs {
		if ref.offset > upTo {
			k.skip(p, ref.key, fmt.Errorf("%w: its offset %d is beyond the changelog's last stable offset %d (topic recreated?)", ErrInvalid, ref.offset, upTo))
			continue
		}
		if ref.offset <= after {
			break // sorted: the rest are older still
		}
		if k.state.isCorrupt(ref.key) {
			k.skip(p, ref.key, fmt.Errorf("%w: its files failed their check after an earlier restore of it (corrupt)", ErrInvalid))
			continue
		}
		o, pending, err := k.restoreOne(ctx, p, topicID, ref, deferCheck)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, nil, ctx.Err()
			}
			k.skip(p, ref.key, err)
			continue
		}
		if pending != nil {
			check = func(ctx context.Context) error {
				err := pending.wait(ctx)
				if err != nil && !errors.Is(err, ctx.Err()) {
					k.state.markCorrupt(ref.key)
					k.skip(p, ref.key, err)
				}
				return err
			}
		}
		d := time.Since(start)
		if mt := k.cfg.Metrics; mt != nil {
			mt.restores.WithLabelValues("restored").Inc()
			mt.restoreTime.Observe(d.Seconds())
		}
		k.log.Info("partition restored from a checkpoint", "partition", p, "offset", o, "manifest", ref.key, "took", d,
			"checking", check != nil)
		return o, true, check, nil
	}
	if mt := k.cfg.Metrics; mt != nil {
		mt.restores.WithLabelValues("none").Inc()
	}
	return 0, false, nil, nil
}

// pendingCheck is the check of linked files that runs after a restore
// returned (RestoreUnchecked). It starts when its check is first waited
// for, so that it does not compete for the CPU with the restore it
// follows (on 2 cores, reading every byte beside the ingest and the
// tail slowed them down as much as it saved).
type pendingCheck struct {
	start func()        // starts the check, once
	done  chan struct{} // closed when err is set
	err   error
}

// wait starts the check if it has not started, and waits for it or for
// ctx's end (then ctx's error: the check reads local files without a
// context, so its own error is never one).
func (pc *pendingCheck) wait(ctx context.Context) error {
	pc.start()
	select {
	case <-pc.done:
		return pc.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkLinked returns the check of the linked files against files, run
// in the background once started, downloadWorkers at once; it closes
// them.
func checkLinked(files []File, linked []*os.File) *pendingCheck {
	pc := &pendingCheck{done: make(chan struct{})}
	pc.start = sync.OnceFunc(func() { go pc.run(files, linked) })
	return pc
}

func (pc *pendingCheck) run(files []File, linked []*os.File) {
	defer close(pc.done)
	var g errgroup.Group
	g.SetLimit(downloadWorkers())
	for i, in := range linked {
		if in == nil {
			continue
		}
		g.Go(func() error {
			defer in.Close()
			return checkLocal(files[i], in)
		})
	}
	pc.err = g.Wait()
}

func (k *Bucket) skip(p int32, key string, err error) {
	k.log.Warn("skipping a checkpoint", "partition", p, "manifest", key, "err", err)
	if mt := k.cfg.Metrics; mt != nil {
		mt.skipped.Inc()
	}
}

// restoreOne downloads, checks and restores one checkpoint.
func (k *Bucket) restoreOne(ctx context.Context, p int32, topicID string, ref manifestRef, deferCheck bool) (int64, *pendingCheck, error) {
	m, err := k.readManifest(ctx, ref)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case m.Topic != k.cfg.Topic || m.Partition != p:
		return 0, nil, fmt.Errorf("%w: the manifest is of %s[%d]", ErrInvalid, m.Topic, m.Partition)
	case m.TopicID != topicID:
		return 0, nil, fmt.Errorf("%w: the manifest is of topic incarnation %s, the changelog's is %s (topic recreated)", ErrInvalid, m.TopicID, topicID)
	}
	tmp, err := os.MkdirTemp(k.cfg.TempDir, restoreDirPrefix)
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(tmp) // a pending check reads its files through open descriptors
	dir := filepath.Join(tmp, "ck")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, nil, err
	}
	start := time.Now()
	// Only the tables of format 2 are ingested as they are; a format 1
	// checkpoint is opened, so its files are checked first.
	deferCheck = deferCheck && m.Format != formatPebbleCheckpoint
	// A format 1 checkpoint is copied into new tables, which are synced
	// as they are written; the tables of format 2 are linked into the
	// store as they are, so they must be on disk first.
	paths, pending, synced, err := k.downloadAll(ctx, m.Files, dir, m.Format != formatPebbleCheckpoint, deferCheck)
	if err != nil {
		return 0, nil, err
	}
	downloaded := time.Since(start)
	var o int64
	if m.Format == formatPebbleCheckpoint {
		o, err = restorePebbleCheckpoint(ctx, k.cfg.Store, p, dir, m.Offset)
	} else {
		o, err = m.Offset, k.cfg.Store.IngestPartition(ctx, p, paths, m.Offset)
	}
	if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		if pending != nil {
			_ = pending.wait(context.Background()) // its files are closed; the ingest's error is the one to report
		}
		return 0, nil, err
	}
	k.log.Info("checkpoint downloaded and ingested", "partition", p, "files", len(m.Files),
		"download", downloaded-synced, "sync", synced, "ingest", time.Since(start)-downloaded)
	return o, pending, nil
}

// restorePebbleCheckpoint restores a checkpoint of manifest format 1 (a
// Pebble checkpoint of the owner's store, downloaded into dir): its
// partition's keys are copied into new tables, then ingested.
func restorePebbleCheckpoint(ctx context.Context, st *store.Store, p int32, dir string, offset int64) (int64, error) {
	ck, err := store.OpenCheckpoint(dir)
	if err != nil {
		return 0, err
	}
	defer ck.Close()
	o, ok, err := ck.Offset(p)
	switch {
	case err != nil:
		return 0, err
	case !ok || o != offset:
		return 0, fmt.Errorf("%w: the checkpoint holds offset %d (found %v), its manifest says %d", ErrInvalid, o, ok, offset)
	}
	return st.RestorePartition(ctx, p, ck)
}

// downloadWorkers is how many files a restore downloads at once. A
// download is bound by the bucket's latency and bandwidth and by SHA-256
// (one core each, about 1.5 GB/s with the CPU's SHA instructions): a
// few per core keep both the network and the cores busy without a pile
// of half-written files.
func downloadWorkers() int { return min(max(2*runtime.GOMAXPROCS(0), 4), 16) }

// downloadBuffer is the size of a download's reads and writes.
const downloadBuffer = 1 << 20

// downloadAll downloads files into dir, downloadWorkers at once, each
// checked against its size and checksum as it streams (no second read),
// and returns their paths in the order of files. With sync, every file
// is fsynced once all are downloaded (they are then linked into the
// store, and must not be lost in a crash after that); synced is how long
// that took. The first error stops the others.
//
// With deferCheck, the files linked from a local bucket are not checked
// before downloadAll returns: linked is their check, started when it is
// first waited for (nil when no file was linked).
func (k *Bucket) downloadAll(ctx context.Context, files []File, dir string, sync, deferCheck bool) (paths []string, linked *pendingCheck, synced time.Duration, err error) {
	paths = make([]string, len(files))
	var open []*os.File
	if deferCheck {
		open = make([]*os.File, len(files))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(downloadWorkers())
	for i, f := range files {
		paths[i] = filepath.Join(dir, f.Name)
		g.Go(func() error {
			var keep **os.File
			if deferCheck {
				keep = &open[i]
			}
			return k.download(gctx, f, paths[i], keep)
		})
	}
	if err := g.Wait(); err != nil {
		for _, f := range open {
			if f != nil {
				_ = f.Close()
			}
		}
		return nil, nil, 0, err
	}
	if slices.ContainsFunc(open, func(f *os.File) bool { return f != nil }) {
		linked = checkLinked(files, open)
	}
	if !sync {
		return paths, linked, 0, nil
	}
	start := time.Now()
	// The downloads have handed their bytes to the kernel, which has
	// been writing them back meanwhile; the syncs run at once so that
	// the device sees them together.
	g, _ = errgroup.WithContext(ctx)
	g.SetLimit(downloadWorkers())
	for _, path := range paths {
		g.Go(func() error { return syncFile(path) })
	}
	err = g.Wait()
	if err == nil {
		err = syncFile(dir)
	}
	if err != nil {
		if linked != nil {
			_ = linked.wait(context.Background())
		}
		return nil, nil, 0, err
	}
	return paths, linked, time.Since(start), nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	return nil
}

// download puts a checkpoint file at path, checking its size and hash.
//
// When the bucket is a local directory on the same file system
// (file://), the bucket's file is hard-linked to path and read once for
// its hash: no bytes are written. Objects of a bucket are never written
// in place (fileblob replaces an object by renaming a new file over it,
// and checkpoint files are named by their content), and the store never
// writes a table in place either, so the link is as good as a copy; the
// hash is read from the link, not from the bucket's name, so an object
// replaced meanwhile cannot slip in unchecked. Otherwise (another file
// system, S3) the object is streamed to path and hashed on the way.
//
// With keep, a linked file is not checked but left open in *keep for a
// check later (RestoreUnchecked); its size is checked here.
func (k *Bucket) download(ctx context.Context, f File, path string, keep **os.File) error {
	r, local, err := k.openObject(ctx, k.fileKey(f.SHA256))
	if err != nil {
		return fmt.Errorf("%w: file %s (%s): %w", ErrInvalid, f.Name, f.SHA256, err)
	}
	defer r.Close()
	if r.Size() != f.Size {
		return fmt.Errorf("%w: file %s (%s) has %d bytes, the manifest says %d (truncated)", ErrInvalid, f.Name, f.SHA256, r.Size(), f.Size)
	}
	if local != "" && os.Link(local, path) == nil {
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		if keep != nil {
			*keep = in
			return nil
		}
		defer in.Close()
		return checkLocal(f, in)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	err = checkFile(f, r, out, make([]byte, downloadBuffer))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkLocal checks a linked file against f: through a mapping where it
// can, by reading it otherwise.
func checkLocal(f File, in *os.File) error {
	if ok, err := checkMapped(f, in); ok {
		return err
	}
	return checkFile(f, io.NewSectionReader(in, 0, f.Size+1), io.Discard, make([]byte, downloadBuffer))
}

// openObject opens the object at key, and names the file behind it when
// the bucket is a local directory (file://): "" otherwise.
func (k *Bucket) openObject(ctx context.Context, key string) (r *blob.Reader, local string, err error) {
	var f *os.File
	r, err = k.b.NewReader(ctx, key, &blob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
		as(&f)
		return nil
	}})
	if err != nil {
		return nil, "", err
	}
	if f != nil {
		local = f.Name()
	}
	return r, local, nil
}

// castagnoli is the CRC-32C table (hardware-accelerated on amd64 and
// arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkFile copies r to w, checking that r holds exactly f's bytes: its
// size, and its CRC-32C when the manifest has one, its SHA-256 otherwise.
//
// The checksum guards against corruption and truncation, not against a
// forger: anyone who can write the bucket can write a manifest too. For
// that CRC-32C is as good as SHA-256 (it catches every burst error of up
// to 32 bits, other corruption with probability 1 - 2^-32, and Pebble
// checks each block's own checksum when it reads it), and at 10 GB/s or
// more it is about a tenth of SHA-256's cost: on a busy machine, the hash
// was what grew a restore with the partition's size.
func checkFile(f File, r io.Reader, w io.Writer, buf []byte) error {
	var h hash.Hash = crc32.New(castagnoli)
	want := f.CRC32C
	if want == "" {
		h, want = sha256.New(), f.SHA256
	}
	// At most one byte more than the manifest says is read: enough to
	// tell a longer file, without reading an unbounded one.
	n, err := io.CopyBuffer(io.MultiWriter(w, h), io.LimitReader(r, f.Size+1), buf)
	switch {
	case err != nil:
		return fmt.Errorf("download %s (%s): %w", f.Name, f.SHA256, err)
	case n != f.Size:
		return fmt.Errorf("%w: file %s (%s) has %d bytes, the manifest says %d (truncated)", ErrInvalid, f.Name, f.SHA256, n, f.Size)
	case hex.EncodeToString(h.Sum(nil)) != want:
		return fmt.Errorf("%w: file %s (%s) does not match its checksum %s (corrupt)", ErrInvalid, f.Name, f.SHA256, want)
	}
	return nil
}

// Newest returns the newest manifest of partition p that decodes, or nil.
// It checks no file: a new owner reads it to know when its next
// checkpoint is due.
func (k *Bucket) Newest(ctx context.Context, p int32) (*Manifest, error) {
	refs, err := k.list(ctx, k.manifestDir(p))
	if err != nil {
		return nil, err
	}
	for _, ref := range refs {
		m, err := k.readManifest(ctx, ref)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, ErrInvalid) {
			return nil, err
		}
	}
	return nil, nil
}

func jsonMarshal(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}
