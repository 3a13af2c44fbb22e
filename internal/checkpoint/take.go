package checkpoint

import (
	"context"
	"crypto/md5" //nolint:gosec // S3's Content-MD5 integrity check, not security
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	dir := filepath.Join(tmp, "ck")
	offset, ok, err := k.cfg.Store.CheckpointPartition(p, dir)
	if err != nil || !ok {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint partition %d: %w", p, err)
	}
	m := &Manifest{Format: ManifestFormat, Topic: k.cfg.Topic, TopicID: opts.TopicID, Partition: p, Offset: offset,
		Generation: opts.Generation, Writer: k.writer, CreatedAt: time.Now().UTC()}
	var uploaded, reused int
	var bytes int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, up, err := k.putFile(ctx, path, e.Name())
		if err != nil {
			return nil, fmt.Errorf("checkpoint partition %d: upload %s: %w", p, e.Name(), err)
		}
		m.Files = append(m.Files, f)
		if up {
			uploaded++
			bytes += f.Size
		} else {
			reused++
		}
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
	k.state.rememberManifest(key, m)
	if mt := k.cfg.Metrics; mt != nil {
		mt.taken.Inc()
		mt.uploaded.Add(float64(uploaded))
		mt.uploadBytes.Add(float64(bytes))
		mt.reused.Add(float64(reused))
		mt.checkpointAt.WithLabelValues(strconv.Itoa(int(p))).Set(float64(offset))
	}
	k.log.Info("checkpoint written", "partition", p, "offset", offset, "manifest", key,
		"files", len(m.Files), "uploaded", uploaded, "uploaded_bytes", bytes, "reused", reused)
	return m, nil
}

// putFile uploads a file of a checkpoint unless the bucket holds it,
// and reports whether it uploaded.
func (k *Bucket) putFile(ctx context.Context, path, name string) (File, bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return File{}, false, err
	}
	// An sstable's name is never reused by the store, and its bytes never
	// change: its hash is computed once. Other files (WAL, MANIFEST,
	// OPTIONS, markers) are hashed each time.
	sst := strings.HasSuffix(name, ".sst")
	k.state.mu.Lock()
	h, known := k.state.hashes[name]
	k.state.mu.Unlock()
	if !sst || !known || h.size != st.Size() {
		sum, err := hashFile(path)
		if err != nil {
			return File{}, false, err
		}
		h = fileHash{size: st.Size(), sum: sum}
		if sst {
			k.state.mu.Lock()
			k.state.hashes[name] = h
			k.state.mu.Unlock()
		}
	}
	f := File{Name: name, SHA256: h.sum, Size: h.size}
	key := k.fileKey(h.sum)
	// Asked each time, not remembered: a file deleted from the bucket
	// (by hand, or a sweep) is uploaded again by the next checkpoint.
	have := false
	attrs, err := k.b.Attributes(ctx, key)
	switch {
	case err == nil && attrs.Size == h.size:
		have = true
	case err != nil && gcerrors.Code(err) != gcerrors.NotFound:
		return File{}, false, err
	}
	if have {
		k.markUploaded(h.sum)
		return f, false, nil
	}
	if err := k.upload(ctx, path, key); err != nil {
		return File{}, false, err
	}
	k.markUploaded(h.sum)
	return f, true, nil
}

func (k *Bucket) markUploaded(sum string) {
	k.state.mu.Lock()
	defer k.state.mu.Unlock()
	delete(k.state.unreferenced, sum)
}

// upload writes a file with its MD5 as Content-MD5, so a transfer that
// is cut or altered is refused by the bucket rather than stored.
func (k *Bucket) upload(ctx context.Context, path, key string) error {
	sum, err := md5File(path)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := k.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", ContentMD5: sum})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func md5File(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := md5.New() //nolint:gosec // see upload
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
