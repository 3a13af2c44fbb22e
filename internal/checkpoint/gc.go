package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Retention (docs/checkpoints.md):
//
//   - per partition, the Keep manifests of the highest offsets are kept;
//     an older one is deleted once it has been out of them for Grace
//     (since the manifest that pushed it out was written), so a restore
//     that picked it just before has Grace to read it;
//   - a file is deleted when no manifest of the bucket's prefix (any
//     topic, any partition: files are shared) names it, it is older than
//     Grace, and a sweep of this process saw it unreferenced at least
//     Grace before. A checkpoint being written names files in its
//     manifest only at the end: the files it uploaded are young, and an
//     old one it found in the bucket is deleted only if the manifest is
//     still not there Grace later.
//
// Deleting is idempotent: several owners may collect concurrently.

// Retain deletes the manifests of partition p that retention no longer
// keeps, and returns how many it deleted.
func (k *Bucket) Retain(ctx context.Context, p int32) (int, error) {
	refs, err := k.list(ctx, k.manifestDir(p))
	if err != nil {
		return 0, err
	}
	now := k.cfg.now()
	n := 0
	for i := k.cfg.Keep; i < len(refs); i++ {
		// refs[i-Keep] is the newest manifest whose writing pushed
		// refs[i] out of the Keep newest.
		if now.Sub(refs[i-k.cfg.Keep].modTime) < k.cfg.Grace {
			continue
		}
		if err := k.delete(ctx, refs[i].key); err != nil {
			return n, err
		}
		k.state.forgetManifest(refs[i].key)
		n++
		if mt := k.cfg.Metrics; mt != nil {
			mt.deleted.WithLabelValues("manifest").Inc()
		}
	}
	return n, nil
}

// Sweep deletes the files retention no longer keeps, and returns how many
// it deleted. A manifest it cannot read makes it stop without deleting:
// it might name any file.
func (k *Bucket) Sweep(ctx context.Context) (int, error) {
	referenced := map[string]bool{}
	it := k.b.List(&blob.ListOptions{Prefix: k.cfg.Prefix + "manifests/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, errEOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("list checkpoint manifests: %w", err)
		}
		o, g, ok := parseManifestKey(obj.Key)
		if obj.IsDir || !ok {
			continue
		}
		m, err := k.readManifest(ctx, manifestRef{key: obj.Key, offset: o, generation: g, modTime: obj.ModTime})
		switch {
		case errors.Is(err, ErrInvalid):
			continue // names nothing a restore would use
		case gcerrors.Code(err) == gcerrors.NotFound:
			continue // deleted meanwhile
		case err != nil:
			return 0, err
		}
		for _, f := range m.Files {
			referenced[f.SHA256] = true
		}
	}
	now := k.cfg.now()
	n := 0
	fit := k.b.List(&blob.ListOptions{Prefix: k.cfg.Prefix + "files/"})
	for {
		obj, err := fit.Next(ctx)
		if errors.Is(err, errEOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("list checkpoint files: %w", err)
		}
		sum := strings.TrimPrefix(obj.Key, k.cfg.Prefix+"files/")
		k.state.mu.Lock()
		if referenced[sum] {
			delete(k.state.unreferenced, sum)
			k.state.mu.Unlock()
			continue
		}
		first, seen := k.state.unreferenced[sum]
		if !seen {
			k.state.unreferenced[sum] = now
		}
		k.state.mu.Unlock()
		if !seen || now.Sub(first) < k.cfg.Grace || now.Sub(obj.ModTime) < k.cfg.Grace {
			continue
		}
		if err := k.delete(ctx, obj.Key); err != nil {
			return n, err
		}
		k.state.mu.Lock()
		delete(k.state.unreferenced, sum)
		k.state.mu.Unlock()
		n++
		if mt := k.cfg.Metrics; mt != nil {
			mt.deleted.WithLabelValues("file").Inc()
		}
	}
	k.state.mu.Lock()
	k.state.lastGC = now
	k.state.mu.Unlock()
	return n, nil
}

func (k *Bucket) delete(ctx context.Context, key string) error {
	if err := k.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}
