package history

// Item bodies and large args reach ClickHouse whole (the bodies table, the
// args column), and each branch's ancestry (the branches table). A body
// or args is stored as chunks, and a chunk record comes only with the
// first version of its project that uses it: the projector keeps the
// chunks it read (in memory, and in the chunks table for those of earlier
// batches) and reassembles what a version names.

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/canon-sync/canon/internal/chunkhash"
	"github.com/canon-sync/canon/schemas"
)

// Bounds of the content caches; past them a cache starts over at the next
// batch (a miss costs one ClickHouse lookup).
const (
	maxCachedChunkBytes = 64 << 20
	maxCachedBodies     = 200_000
	maxCachedAncestries = 100_000
	maxCheckedBodies    = 10_000
)

// batchContent is what a batch holds that ClickHouse may not have yet:
// its chunks and the ancestries of the branches it creates.
type batchContent struct {
	chunks   map[contentKey][]byte
	ancestry map[branchKey][]ancestor
}

func newBatchContent() batchContent {
	return batchContent{chunks: map[contentKey][]byte{}, ancestry: map[branchKey][]ancestor{}}
}

// contentCache outlives batches.
type contentCache struct {
	chunks     map[contentKey][]byte
	chunkBytes int
	bodies     map[contentKey]struct{} // bodies already in a batch
	// absent are chunks ClickHouse did not have: a database filled from
	// the middle of the changelog misses them for good (until a
	// backfill), and asking again for each version would slow the
	// projector down to one lookup per body.
	absent   map[contentKey]struct{}
	ancestry map[branchKey][]ancestor
	// checked are the last bodies checked, by their first chunk's key:
	// the next version of an edited item resumes the hash from them.
	checked map[contentKey]*chunkhash.Checked[string]
}

func newContentCache() contentCache {
	return contentCache{chunks: map[contentKey][]byte{}, bodies: map[contentKey]struct{}{}, absent: map[contentKey]struct{}{},
		ancestry: map[branchKey][]ancestor{}, checked: map[contentKey]*chunkhash.Checked[string]{}}
}

// prune starts the caches over when they grew past their bounds; called
// between batches, when the batches' own content covers what was just
// read.
func (c *contentCache) prune() {
	if c.chunkBytes > maxCachedChunkBytes {
		clear(c.chunks)
		c.chunkBytes = 0
	}
	if len(c.bodies) > maxCachedBodies {
		clear(c.bodies)
	}
	if len(c.absent) > maxCachedBodies {
		clear(c.absent)
	}
	if len(c.ancestry) > maxCachedAncestries {
		clear(c.ancestry)
	}
	if len(c.checked) > maxCheckedBodies {
		clear(c.checked)
	}
}

// contentKey names a chunk or a body by hash within a project. (A struct,
// not the three joined: a body's chunks are looked up by the hundred, and
// a joined key would be a new string each.)
type contentKey struct{ org, project, hash string }

func chunkKey(org, project, hash string) contentKey { return contentKey{org, project, hash} }

// addChunk takes a chunk record into the batch and the cache.
func (p *Projector) addChunk(c *schemas.Chunk, offset int64) {
	p.batch.chunks.add(c.Org, c.Project, c.Hash, [][]byte{c.Data}, offset)
	k := chunkKey(c.Org, c.Project, c.Hash)
	p.batchContent.chunks[k] = c.Data
	if _, ok := p.cache.chunks[k]; !ok {
		p.cache.chunks[k] = c.Data
		p.cache.chunkBytes += len(c.Data)
	}
}

// blob reassembles bytes stored as chunks and checks them against their
// SHA-256; ok is false when a chunk is nowhere to be found (the chunks
// table misses what came before this database was filled: a backfill
// fills it) or the bytes do not match.
func (p *Projector) blob(ctx context.Context, org, project, hash string, chunks []string) (_ [][]byte, ok bool, err error) {
	parts := make([][]byte, len(chunks))
	var missing []string
	for i, h := range chunks {
		k := chunkKey(org, project, h)
		if d, ok := p.cache.chunks[k]; ok {
			parts[i] = d
		} else if d, ok := p.batchContent.chunks[k]; ok {
			parts[i] = d
		} else if p.inflight != nil && p.inflight.content.chunks[k] != nil {
			parts[i] = p.inflight.content.chunks[k]
		} else if _, absent := p.cache.absent[k]; absent {
			return nil, false, nil
		} else {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		var found map[string][]byte
		if err := retry(ctx, p.cfg.Log, p.m.retries, "read chunks", func() error {
			var err error
			found, err = p.w.chunksIn(ctx, org, project, missing)
			return err
		}); err != nil {
			return nil, false, err
		}
		for i, h := range chunks {
			if parts[i] != nil {
				continue
			}
			d, ok := found[h]
			if !ok {
				p.cache.absent[chunkKey(org, project, h)] = struct{}{}
				p.cfg.Log.Warn("projector: a chunk is neither read nor in ClickHouse; backfill this database to have it",
					"project", org+"/"+project, "chunk", h, "of", hash)
				return nil, false, nil
			}
			parts[i] = d
			p.cache.chunks[chunkKey(org, project, h)] = d
			p.cache.chunkBytes += len(d)
		}
	}
	// The parts are hashed as they are, from the chunk after those this
	// body shares with the last one checked that starts like it (the
	// version before, for an edited item). They are returned as they are:
	// a row keeps them and the insert joins them.
	var first contentKey // no body of no chunks is kept
	if len(chunks) > 0 {
		first = chunkKey(org, project, chunks[0])
	}
	hs, err := chunkhash.New(chunks, p.cache.checked[first])
	if err != nil {
		return nil, false, err
	}
	for i, d := range parts {
		if i >= hs.Start {
			if err := hs.Write(d); err != nil {
				return nil, false, err
			}
		}
	}
	sum, checked := hs.Sum()
	if hex.EncodeToString(sum[:]) != hash {
		p.cfg.Log.Warn("projector: reassembled chunks do not match their hash", "project", org+"/"+project, "hash", hash)
		return nil, false, nil
	}
	if checked != nil {
		p.cache.checked[first] = checked
	}
	return parts, true, nil
}

// content adds what a version brings besides its rows: the bodies of its
// puts not seen before, and its ancestry if it is a branch's first
// version. It returns the large args of its mutations, reassembled, by
// index.
func (p *Projector) content(ctx context.Context, v *schemas.Version, offset int64) (map[int]string, error) {
	var bigArgs map[int]string
	for i := range v.Mutations {
		o := &v.Mutations[i]
		if o.ArgsRef == nil {
			continue
		}
		args, ok, err := p.blob(ctx, v.Org, v.Project, o.ArgsRef.Hash, o.ArgsRef.Chunks)
		if err != nil {
			return nil, err
		}
		if ok {
			if bigArgs == nil {
				bigArgs = map[int]string{}
			}
			bigArgs[i] = joinParts(args)
		}
	}
	for i := range v.Items {
		it := &v.Items[i]
		if it.Op != schemas.OpPut || it.Hash == "" {
			continue
		}
		k := chunkKey(v.Org, v.Project, it.Hash)
		if _, seen := p.cache.bodies[k]; seen {
			continue
		}
		body, ok, err := p.blob(ctx, v.Org, v.Project, it.Hash, it.Chunks)
		if err != nil {
			return nil, err
		}
		if ok {
			p.batch.bodies.add(v.Org, v.Project, it.Hash, body, offset)
			p.cache.bodies[k] = struct{}{}
		}
	}
	if v.Version == 1 {
		as, err := p.ancestry(ctx, v)
		if err != nil {
			return nil, err
		}
		p.batch.addBranch(v.Org, v.Project, v.Branch, as, offset)
	}
	return bigArgs, nil
}

// ancestry is the ancestry of the branch a first version starts: itself,
// and for a branch made from another, its base at the base version and
// the base's own ancestors (which the base saw at the versions it saw).
func (p *Projector) ancestry(ctx context.Context, v *schemas.Version) ([]ancestor, error) {
	as := []ancestor{{branch: v.Branch}}
	if v.Base != nil {
		as = append(as, ancestor{branch: v.Base.Branch, depth: 1, upto: v.Base.Version})
		base := branchKey{v.Org, v.Project, v.Base.Branch}
		baseAs, ok := p.cache.ancestry[base]
		if !ok {
			baseAs, ok = p.batchContent.ancestry[base]
		}
		if !ok && p.inflight != nil {
			baseAs, ok = p.inflight.content.ancestry[base]
		}
		if !ok {
			if err := retry(ctx, p.cfg.Log, p.m.retries, "read a branch's ancestry", func() error {
				var err error
				baseAs, err = p.w.ancestorsOf(ctx, v.Org, v.Project, v.Base.Branch)
				return err
			}); err != nil {
				return nil, err
			}
			if len(baseAs) == 0 {
				p.cfg.Log.Warn("projector: the base of a branch is not in ClickHouse; the branch's ancestry stops at it",
					"project", v.Org+"/"+v.Project, "branch", v.Branch, "base", fmt.Sprintf("%s@%d", v.Base.Branch, v.Base.Version))
			}
		}
		for _, a := range baseAs {
			if a.depth > 0 {
				as = append(as, ancestor{branch: a.branch, depth: a.depth + 1, upto: a.upto})
			}
		}
	}
	k := branchKey{v.Org, v.Project, v.Branch}
	p.cache.ancestry[k] = as
	p.batchContent.ancestry[k] = as
	return as, nil
}

func joinParts(parts [][]byte) string {
	n := 0
	for _, d := range parts {
		n += len(d)
	}
	var b strings.Builder
	b.Grow(n)
	for _, d := range parts {
		b.Write(d)
	}
	return b.String()
}
