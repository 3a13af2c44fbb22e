package checkpoint

import (
	"context"
	"crypto/md5" //nolint:gosec // S3's Content-MD5 integrity check, not security
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// TakeOptions says who takes a checkpoint.
type TakeOptions struct {
	// TopicID is the changelog's incarnation (its Kafka topic id, hex).
	TopicID string
	// Generation is the consumer group generation the owner holds the
	// partition in; -1 when not known.
	Generation int32
	// beforeManifest, if set, runs after the files are uploaded and
	// before the manifest is written (tests: a crash during upload).
	beforeManifest func() error
}

// Take takes a checkpoint of partition p of the store and uploads it:
// the files the bucket does not hold yet, then the manifest. It returns
// the manifest, or nil when the store holds nothing of p. A crash or an
// error before the manifest is written leaves files no manifest names,
// which garbage collection removes; it never leaves a manifest of
// missing files.
func (k *Bucket) Take(ctx context.Context, p int32, opts TakeOptions) (*Manifest, error) {
	if opts.TopicID == "" {
		return nil, errors.New("checkpoint: take: no topic id")
	}
	tmp, err := os.MkdirTemp(k.cfg.TempDir, takeDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint partition %d: %w", p, err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	paths, offset, ok, err := k.cfg.Store.ExportPartition(ctx, p, filepath.Join(tmp, "tables"))
	if err != nil || !ok {
		return nil, err
	}
	exported := time.Since(start)
	m := &Manifest{Format: ManifestFormat, Topic: k.cfg.Topic, TopicID: opts.TopicID, Partition: p, Offset: offset,
		Generation: opts.Generation, Writer: k.writer, CreatedAt: time.Now().UTC()}
	var uploaded, reused int
	var bytes int64
	var fresh []string // keys of the files uploaded
	for _, path := range paths {
		name := filepath.Base(path)
		f, up, err := k.putFile(ctx, path, name)
		if err != nil {
			return nil, fmt.Errorf("checkpoint partition %d: upload %s: %w", p, name, err)
		}
		m.Files = append(m.Files, f)
		if up {
			uploaded++
			bytes += f.Size
			fresh = append(fresh, k.fileKey(f.SHA256))
		} else {
			reused++
		}
	}
	if err := k.syncLocal(ctx, fresh); err != nil {
		return nil, fmt.Errorf("checkpoint partition %d: %w", p, err)
	}
	if opts.beforeManifest != nil {
		if err := opts.beforeManifest(); err != nil {
			return nil, err
		}
	}
	data, err := jsonMarshal(m)
	if err != nil {
		return nil, err
	}
	key := k.manifestKey(m)
	if err := k.b.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true}); err != nil {
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			err = ErrExists
		}
		return nil, fmt.Errorf("checkpoint partition %d: write manifest %s: %w", p, key, err)
	}
	if err := k.syncLocal(ctx, []string{key}); err != nil {
		return nil, fmt.Errorf("checkpoint partition %d: manifest %s: %w", p, key, err)
	}
	k.state.rememberManifest(key, m)
	if mt := k.cfg.Metrics; mt != nil {
		mt.taken.Inc()
		mt.uploaded.Add(float64(uploaded))
		mt.uploadBytes.Add(float64(bytes))
		mt.reused.Add(float64(reused))
		mt.checkpointAt.WithLabelValues(strconv.Itoa(int(p))).Set(float64(offset))
	}
	k.log.Info("checkpoint written", "partition", p, "offset", offset, "manifest", key,
		"files", len(m.Files), "uploaded", uploaded, "uploaded_bytes", bytes, "reused", reused,
		"export", exported, "took", time.Since(start))
	return m, nil
}

// putFile uploads a file of a checkpoint unless the bucket holds it,
// and reports whether it uploaded.
func (k *Bucket) putFile(ctx context.Context, path, name string) (File, bool, error) {
	sum, crc, md5sum, size, err := hashFile(path)
	if err != nil {
		return File{}, false, err
	}
	f := File{Name: name, SHA256: sum, CRC32C: crc, Size: size}
	key := k.fileKey(sum)
	// Asked each time, not remembered: a file deleted from the bucket
	// (by hand, or a sweep) is uploaded again by the next checkpoint.
	attrs, err := k.b.Attributes(ctx, key)
	switch {
	case err == nil && attrs.Size == size:
		k.markUploaded(sum)
		return f, false, nil
	case err != nil && gcerrors.Code(err) != gcerrors.NotFound:
		return File{}, false, err
	}
	if err := k.upload(ctx, path, key, md5sum); err != nil {
		return File{}, false, err
	}
	k.markUploaded(sum)
	return f, true, nil
}

func (k *Bucket) markUploaded(sum string) {
	k.state.mu.Lock()
	defer k.state.mu.Unlock()
	delete(k.state.unreferenced, sum)
}

// upload writes a file with its MD5 as Content-MD5, so a transfer that
// is cut or altered is refused by the bucket rather than stored.
func (k *Bucket) upload(ctx context.Context, path, key string, md5sum []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := k.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", ContentMD5: md5sum})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// hashFile reads a file once for its SHA-256 (hex: its name in the
// bucket), its CRC-32C (hex: what a restore checks), its MD5 (for the
// upload) and its size.
func hashFile(path string) (sum, crc string, md5sum []byte, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", nil, 0, err
	}
	defer f.Close()
	h, c, m := sha256.New(), crc32.New(castagnoli), md5.New() //nolint:gosec // see upload
	size, err = io.Copy(io.MultiWriter(h, c, m), f)
	if err != nil {
		return "", "", nil, 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), hex.EncodeToString(c.Sum(nil)), m.Sum(nil), size, nil
}

// syncLocal makes the objects at keys durable when the bucket is a local
// directory (file://): the files and the directories that name them are
// fsynced. gocloud's fileblob renames a written object into place without
// an fsync, so a machine crash could otherwise leave a manifest naming
// files the disk never got (a restore would find them truncated and fall
// back to an older checkpoint), and a restore, which fsyncs what it links
// into the store, would pay the checkpoint's writeback. Object stores
// (S3) are durable when a write returns: nothing to do.
func (k *Bucket) syncLocal(ctx context.Context, keys []string) error {
	dirs := map[string]bool{}
	for _, key := range keys {
		r, path, err := k.openObject(ctx, key)
		if err != nil {
			return err
		}
		_ = r.Close()
		if path == "" {
			return nil // not a local directory
		}
		if err := syncFile(path); err != nil {
			return err
		}
		dirs[filepath.Dir(path)] = true
	}
	for dir := range dirs {
		if err := syncFile(dir); err != nil {
			return err
		}
	}
	return nil
}
