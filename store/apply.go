package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/internal/chunkhash"
	"github.com/canon-sync/canon/schemas"
)

// Record is one decoded record of canon.versions: exactly one of Chunk,
// Version and Deploy is set.
type Record struct {
	Chunk   *schemas.Chunk
	Version *schemas.Version
	// Deploy is a bundle activation (see bundles.go).
	Deploy *schemas.Deploy
}

// Apply writes decoded changelog records of one partition and the
// partition's next changelog offset (the offset after the last record
// read) in one atomic, synced batch: after a crash the store holds either
// all of it or none of it, so the stored offset always matches the data.
//
// Apply is idempotent: a version already stored is skipped when its state
// hash is the one stored (ErrConflict otherwise), chunks are
// content-addressed, and the stored offset never moves back. Applying the
// same records twice therefore changes nothing.
//
// Each version must follow its branch's head, possibly one applied
// earlier in the same call (ErrGap otherwise); the chunks of its bodies
// must be stored or in recs (chunks are applied before versions); and its
// StateHash must be what the store computes from the parent's state sum,
// the changed items and the scalars (ErrStateHash otherwise). The first
// version of a branch with a Base starts from the base branch's items at
// the base version: their index entries are copied, not their bodies.
// Every record's project must belong to partition (ErrWrongPartition).
// On error nothing is written.
func (s *Store) Apply(partition int32, recs []Record, nextOffset int64) error {
	return s.apply(partition, recs, nextOffset, false)
}

// ApplyDecided is Apply for records that model's Decider of this process
// made from the bytes they carry, as the sequencer applies its own
// transaction: every chunk's hash was computed from its data, and every
// body's hash from the body whose cut the chunks are (Decider.chunkItem,
// storeArgs). Apply checks both again by hashing every new chunk and the
// body's bytes from the first chunk that differs from the body checked
// before it, which re-reads from the database the chunks after an edit;
// ApplyDecided does not hash. It still refuses a body whose chunks are
// neither stored nor in recs, and everything else Apply refuses.
//
// Records read from the changelog (a restore, a read replica, a
// pipeline) must go through Apply: they were written by another process,
// perhaps another version of Canon.
func (s *Store) ApplyDecided(partition int32, recs []Record, nextOffset int64) error {
	return s.apply(partition, recs, nextOffset, true)
}

func (s *Store) apply(partition int32, recs []Record, nextOffset int64, decided bool) error {
	if err := s.checkPartition(partition); err != nil {
		return err
	}
	if nextOffset < 0 {
		return fmt.Errorf("%w: next offset %d of partition %d is negative", ErrInvalid, nextOffset, partition)
	}
	ps := &s.parts[partition]
	ps.mu.Lock()
	defer ps.mu.Unlock()

	// Records read back what earlier records of the call wrote through the
	// applier, which keeps it in memory, and everything else from the
	// database. Only a version that starts a branch from a base scans the
	// base's entries, which the call may have written: then the batch is
	// indexed, so that it reads its own writes.
	var b *pebble.Batch
	var reader pebble.Reader = s.db
	if copiesBase(recs) {
		b = s.db.NewIndexedBatch()
		reader = b
	} else {
		b = s.db.NewBatch()
	}
	defer b.Close()
	a := ps.applier(s, partition, b, reader)
	a.decided = decided
	defer a.reset()

	for i, r := range recs {
		if n := btoi(r.Chunk != nil) + btoi(r.Version != nil) + btoi(r.Deploy != nil); n != 1 {
			return fmt.Errorf("apply record %d of partition %d: %w: exactly one of Chunk, Version and Deploy must be set", i, partition, ErrInvalid)
		}
		if r.Deploy != nil {
			if err := a.applyDeploy(r.Deploy); err != nil {
				return fmt.Errorf("apply record %d of partition %d: deploy %s of %s/%s: %w", i, partition, r.Deploy.Hash, r.Deploy.Org, r.Deploy.Project, err)
			}
			continue
		}
		if r.Chunk == nil {
			continue
		}
		if err := a.applyChunk(r.Chunk); err != nil {
			return fmt.Errorf("apply record %d of partition %d: chunk %s of %s/%s: %w", i, partition, r.Chunk.Hash, r.Chunk.Org, r.Chunk.Project, err)
		}
	}
	for i, r := range recs {
		if r.Version == nil {
			continue
		}
		v := r.Version
		if err := a.applyVersion(v); err != nil {
			return fmt.Errorf("apply record %d of partition %d: version %d of %s/%s branch %s: %w", i, partition, v.Version, v.Org, v.Project, v.Branch, err)
		}
	}
	offset, found := ps.offset, ps.offsetFound
	if !ps.offsetKnown {
		var err error
		if offset, found, err = getOffset(s.db, offsetKey(partition)); err != nil {
			return fmt.Errorf("apply to partition %d: %w", partition, err)
		}
	}
	if err := a.flush(); err != nil {
		return fmt.Errorf("apply to partition %d: %w", partition, err)
	}
	if a.sourceSet {
		last, ok, err := getOffset(s.db, sourceKey(partition))
		if err != nil {
			return fmt.Errorf("apply to partition %d: %w", partition, err)
		}
		if !ok || a.source > last {
			if err := b.Set(sourceKey(partition), encodeUint64(uint64(a.source)), nil); err != nil {
				return fmt.Errorf("apply to partition %d: %w", partition, err)
			}
		}
	}
	if !found || nextOffset > offset {
		offset = nextOffset
		if err := b.Set(offsetKey(partition), encodeUint64(uint64(nextOffset)), nil); err != nil {
			return fmt.Errorf("apply to partition %d: %w", partition, err)
		}
	}
	if err := b.Commit(s.writeOpts()); err != nil {
		// The batch may or may not have reached the database.
		ps.forget()
		ps.forgetDeploys()
		return fmt.Errorf("commit %d records and offset %d of partition %d: %w", len(recs), nextOffset, partition, err)
	}
	ps.committed(a, offset)
	ps.committedDeploys(a.deploys)
	s.setApplied(partition, offset)
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// copiesBase reports whether a record is a version that starts a branch
// from a base.
func copiesBase(recs []Record) bool {
	for _, r := range recs {
		if r.Version != nil && r.Version.Base != nil {
			return true
		}
	}
	return false
}

// applier is the state of one Apply: the batch, and what the records
// applied so far wrote (branch heads, latest entries, chunks, manifests),
// which later records of the call read from here, not from the batch.
//
// The keys that each version overwrites, its branch's head, the latest
// entries of its items and its clients' last ids, are written once per
// call, with their final values (flush), rather than once per version: a
// batch of versions of one branch then writes one head, not one per
// version.
type applier struct {
	s *Store
	p int32
	b *pebble.Batch
	// r reads the committed data (or the indexed batch).
	r pebble.Reader
	// decided: the records' hashes were computed from their bytes by
	// this process (ApplyDecided), and are not computed again.
	decided bool

	heads     map[branchID]*branchHead
	latest    map[itemID]latestItem
	lastIDs   map[lastIDID]uint64 // to write
	chunks    map[blobID][]byte   // chunks of the call, checked against their hash
	manifests map[blobID]manifest
	// verified are the bodies the call checked, by first chunk.
	verified map[blobID]*verifiedBody
	// groups, groupClients and clients are the client groups, their
	// clients and the clients' groups the call indexed (bindGroup).
	groups       map[groupID]string
	groupClients map[groupClientID]struct{}
	clients      map[clientID]string

	// source is the highest source offset of the versions the call
	// applied, if it applied one.
	source    int64
	sourceSet bool

	// deploys are the activations the call wrote, by scope.
	deploys map[scopeID]Deployed

	// The last project found valid and in the partition.
	org, project string

	// Reused buffers for keys, values and chunk lists: a batch copies what
	// it is given.
	k1, k2, val []byte
	hashes      [][32]byte
}

type branchID struct{ org, project, branch string }

type itemID struct{ org, project, branch, collection, id string }

type lastIDID struct{ org, project, branch, client string }

type blobID struct {
	org, project string
	hash         [32]byte
}

// branchHead is a branch's head as of the records applied so far.
type branchHead struct {
	headSummary
	// hashes are the state hashes of the versions from..version, which the
	// call applied: a duplicate of one of them is checked against them.
	from   uint64
	hashes [][32]byte
	// flushed is how many of them were when the head was last written.
	flushed uint64
}

// headSummary is what applying a version needs of its branch's head.
type headSummary struct {
	version   uint64 // 0: the branch has no version
	sum       schemas.StateHasher
	stateHash [32]byte
}

// latestItem is an item's latest entry as far as the state hash goes,
// and, when it was written by the call and not yet flushed, the change
// and version that made it.
type latestItem struct {
	exists  bool
	digest  [32]byte
	dirty   bool
	change  *schemas.ItemChange // a put, or nil for a deletion
	version uint64
}

func (a *applier) applyChunk(c *schemas.Chunk) error {
	if err := a.checkProject(c.Org, c.Project); err != nil {
		return err
	}
	h, err := parseHash("hash", c.Hash)
	if err != nil {
		return err
	}
	if !a.decided && sha256.Sum256(c.Data) != h {
		return fmt.Errorf("%w: data of %d bytes does not hash to %s", ErrInvalid, len(c.Data), c.Hash)
	}
	a.chunks[blobID{c.Org, c.Project, h}] = c.Data
	a.k1 = appendChunkKey(a.k1[:0], a.p, c.Org, c.Project, h)
	return a.b.Set(a.k1, c.Data, nil)
}

// checkProject checks that a project's names are valid and that it is in
// the partition.
func (a *applier) checkProject(org, project string) error {
	if org == a.org && project == a.project {
		return nil
	}
	if err := validateProject(org, project); err != nil {
		return err
	}
	if q := a.s.PartitionOf(org, project); q != a.p {
		return fmt.Errorf("%w: the project is in partition %d", ErrWrongPartition, q)
	}
	a.org, a.project = org, project
	return nil
}

func (a *applier) applyVersion(v *schemas.Version) error {
	if err := validateVersion(v); err != nil {
		return err
	}
	if err := a.checkProject(v.Org, v.Project); err != nil {
		return err
	}
	p, org, project, branch := a.p, v.Org, v.Project, v.Branch
	bh, err := a.branch(org, project, branch)
	if err != nil {
		return err
	}
	// A branch holds its versions 1..head and no other.
	if v.Version <= bh.version {
		stored, err := a.stateHashOf(bh, org, project, branch, v.Version)
		if err != nil {
			return err
		}
		if !hashIs(stored, v.StateHash) {
			return fmt.Errorf("%w: two different payloads for version %d: stored state hash %x, record %s", ErrConflict, v.Version, stored, v.StateHash)
		}
		return nil // already applied
	}
	if v.Parent != bh.version {
		return fmt.Errorf("%w: expected version %d (parent %d, the branch head), got version %d with parent %d", ErrGap, bh.version+1, bh.version, v.Version, v.Parent)
	}

	sum := bh.sum
	if v.Base != nil {
		if sum, err = a.copyBase(v); err != nil {
			return err
		}
	}

	for i := range v.Items {
		c := &v.Items[i]
		id := itemID{org, project, branch, c.Collection, c.ID}
		old, err := a.latestItem(id)
		if err != nil {
			return err
		}
		if old.exists {
			sum.Remove(old.digest)
		}
		if c.Op == schemas.OpDelete {
			if !old.exists {
				return fmt.Errorf("%w: item %s/%s is deleted but does not exist", ErrInvalid, c.Collection, c.ID)
			}
			a.k1 = appendItemKey(a.k1[:0], p, org, project, branch, c.Collection, c.ID, v.Version)
			if err := a.b.Set(a.k1, []byte{entryTombstone}, nil); err != nil {
				return err
			}
			a.latest[id] = latestItem{dirty: true}
			continue
		}
		e := entry{version: v.Version, meta: c.Meta, size: c.Size}
		e.hash, _ = decodeHex32(c.Hash) // validated
		a.hashes = a.hashes[:0]
		for _, ch := range c.Chunks {
			h, _ := decodeHex32(ch)
			a.hashes = append(a.hashes, h)
		}
		e.chunks = a.hashes
		if err := a.putManifest(org, project, &e); err != nil {
			return fmt.Errorf("item %s/%s: %w", c.Collection, c.ID, err)
		}
		// c.Hash is the lower-case hex of e.hash: the digest of the entry.
		d := schemas.ItemDigest(c.Collection, c.ID, c.Meta, c.Hash)
		sum.Add(d)
		a.latest[id] = latestItem{exists: true, digest: d, dirty: true, change: c, version: v.Version}
		a.val = e.appendTo(a.val[:0])
		a.k1 = appendItemKey(a.k1[:0], p, org, project, branch, c.Collection, c.ID, v.Version)
		if err := a.b.Set(a.k1, a.val, nil); err != nil {
			return err
		}
	}

	computed, err := sum.StateHash(v.Scalars)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if computed != v.StateHash {
		return fmt.Errorf("%w: the record says %q, the store computes %s", ErrStateHash, v.StateHash, computed)
	}
	stateHash, _ := decodeHex32(computed)
	a.val = appendVersionRecord(a.val[:0], v, sum, stateHash)
	a.k1 = appendVersionKey(a.k1[:0], p, org, project, branch, v.Version)
	if err := a.b.Set(a.k1, a.val, nil); err != nil {
		return err
	}
	for i, m := range v.Mutations {
		if ref := m.ArgsRef; ref != nil {
			// Large args are a blob of the project, readable by hash.
			e := entry{size: ref.Size}
			var err error
			if e.hash, err = parseHash(fmt.Sprintf("mutations[%d].argsRef.hash", i), ref.Hash); err != nil {
				return err
			}
			a.hashes = a.hashes[:0]
			for j, ch := range ref.Chunks {
				h, err := parseHash(fmt.Sprintf("mutations[%d].argsRef.chunks[%d]", i, j), ch)
				if err != nil {
					return err
				}
				a.hashes = append(a.hashes, h)
			}
			e.chunks = a.hashes
			if err := a.putManifest(org, project, &e); err != nil {
				return fmt.Errorf("args of mutation %d of client %s: %w", m.ID, m.Client, err)
			}
		}
		if err := a.bindGroup(org, project, &v.Mutations[i]); err != nil {
			return err
		}
		st := MutationStatus{Version: v.Version, Status: m.Status, Error: m.Error, Code: m.Code}
		a.val = st.appendTo(a.val[:0])
		a.k1 = appendMutationKey(a.k1[:0], p, org, project, branch, m.Client, m.ID)
		if err := a.b.Set(a.k1, a.val, nil); err != nil {
			return err
		}
	}
	for client, id := range v.LastIDs {
		a.lastIDs[lastIDID{org, project, branch, client}] = id
	}
	if !a.sourceSet || v.Source.Offset > a.source {
		a.source, a.sourceSet = v.Source.Offset, true
	}
	bh.version, bh.sum, bh.stateHash = v.Version, sum, stateHash
	bh.hashes = append(bh.hashes, stateHash)
	return nil
}

// flush writes the heads, latest entries and last ids the call changed
// since the last flush.
func (a *applier) flush() error {
	for id, bh := range a.heads {
		if uint64(len(bh.hashes)) == bh.flushed {
			continue // no version applied since the last flush
		}
		bh.flushed = uint64(len(bh.hashes))
		a.val = binary.BigEndian.AppendUint64(a.val[:0], bh.version)
		a.k1 = appendHeadKey(a.k1[:0], a.p, id.org, id.project, id.branch)
		if err := a.b.Set(a.k1, a.val, nil); err != nil {
			return err
		}
	}
	for id, li := range a.latest {
		if !li.dirty {
			continue
		}
		a.k1 = appendLatestKey(a.k1[:0], a.p, id.org, id.project, id.branch, id.collection, id.id)
		if !li.exists {
			if err := a.b.Delete(a.k1, nil); err != nil {
				return err
			}
		} else {
			c := li.change
			e := entry{version: li.version, meta: c.Meta, size: c.Size}
			e.hash, _ = decodeHex32(c.Hash) // validated
			a.hashes = a.hashes[:0]
			for _, ch := range c.Chunks {
				h, _ := decodeHex32(ch)
				a.hashes = append(a.hashes, h)
			}
			e.chunks = a.hashes
			a.val = e.appendTo(a.val[:0])
			if err := a.b.Set(a.k1, a.val, nil); err != nil {
				return err
			}
		}
		li.dirty, li.change = false, nil
		a.latest[id] = li
	}
	for id, last := range a.lastIDs {
		a.val = binary.BigEndian.AppendUint64(a.val[:0], last)
		a.k1 = appendLastIDKey(a.k1[:0], a.p, id.org, id.project, id.branch, id.client)
		if err := a.b.Set(a.k1, a.val, nil); err != nil {
			return err
		}
	}
	clear(a.lastIDs)
	return nil
}

// branch returns a branch's head as of the records applied so far: from
// the call, else from what the partition remembers of earlier calls, else
// from the database (head and version header).
func (a *applier) branch(org, project, branch string) (*branchHead, error) {
	id := branchID{org, project, branch}
	if bh := a.heads[id]; bh != nil {
		return bh, nil
	}
	bh := &branchHead{}
	if h, ok := a.s.parts[a.p].heads[id]; ok {
		bh.headSummary = h
	} else {
		head, err := readHead(a.r, a.p, org, project, branch)
		if err != nil {
			return nil, err
		}
		if head > 0 {
			h, err := readVersionHeader(a.r, a.p, org, project, branch, head)
			if err != nil {
				return nil, err
			}
			bh.version, bh.sum, bh.stateHash = head, h.sum, h.stateHash
		}
	}
	bh.from = bh.version + 1
	a.heads[id] = bh
	return bh, nil
}

// stateHashOf is the stored state hash of version v <= bh.version.
func (a *applier) stateHashOf(bh *branchHead, org, project, branch string, v uint64) ([32]byte, error) {
	switch {
	case v == bh.version:
		return bh.stateHash, nil
	case v >= bh.from:
		return bh.hashes[v-bh.from], nil
	}
	h, err := readVersionHeader(a.r, a.p, org, project, branch, v)
	return h.stateHash, err
}

// latestItem returns an item's latest entry as of the records applied so
// far: from the call, else from what the partition remembers of earlier
// calls, else from the database.
func (a *applier) latestItem(id itemID) (latestItem, error) {
	if li, ok := a.latest[id]; ok {
		return li, nil
	}
	if li, ok := a.s.parts[a.p].latest[id]; ok {
		return li, nil
	}
	a.k2 = appendLatestKey(a.k2[:0], a.p, id.org, id.project, id.branch, id.collection, id.id)
	var li latestItem
	_, err := view(a.r, a.k2, func(raw []byte) error {
		// Decoded in place: only the meta and the body hash matter here.
		e, err := decodeEntryNoCopy(raw)
		if err == nil && !e.deleted {
			li = latestItem{exists: true, digest: e.digest(id.collection, id.id)}
		}
		return err
	})
	return li, err
}

// copyBase starts a new branch from its base: the base branch's items at
// the base version become the new branch's entries at version 1 (the
// version's own Items are applied on top by the caller). It returns the
// base's state sum. The batch is indexed (see Apply): the scan sees the
// base's versions applied earlier in the call.
func (a *applier) copyBase(v *schemas.Version) (schemas.StateHasher, error) {
	base := *v.Base
	bb, err := a.branch(v.Org, v.Project, base.Branch)
	if err != nil {
		return schemas.StateHasher{}, err
	}
	// The scan below reads the base's latest index from the batch.
	if err := a.flush(); err != nil {
		return schemas.StateHasher{}, err
	}
	if base.Version > bb.version {
		return schemas.StateHasher{}, fmt.Errorf("%w: base branch %s has no version %d yet (its head is %d)", ErrGap, base.Branch, base.Version, bb.version)
	}
	sum := bb.sum
	if base.Version < bb.version {
		h, err := readVersionHeader(a.r, a.p, v.Org, v.Project, base.Branch, base.Version)
		if err != nil {
			return schemas.StateHasher{}, err
		}
		sum = h.sum
	}
	p := a.p
	err = scanItems(a.r, p, v.Org, v.Project, base.Branch, nil, base.Version, base.Version == bb.version,
		func(collection, id string, e entry) error {
			e.version = v.Version
			a.val = e.appendTo(a.val[:0])
			a.k1 = appendItemKey(a.k1[:0], p, v.Org, v.Project, v.Branch, collection, id, v.Version)
			if err := a.b.Set(a.k1, a.val, nil); err != nil {
				return err
			}
			a.k1 = appendLatestKey(a.k1[:0], p, v.Org, v.Project, v.Branch, collection, id)
			return a.b.Set(a.k1, a.val, nil)
		})
	if err != nil {
		return schemas.StateHasher{}, fmt.Errorf("copy base %s@%d: %w", base.Branch, base.Version, err)
	}
	return sum, nil
}

// putManifest records how a body is made of chunks, once per body. It
// checks that every chunk of the entry is there and that together they are
// the body (size and hash), so that no read meets a body it cannot
// rebuild; a body already known with the same chunks is not checked again.
//
// A body that is a single chunk, the chunk of its own hash, needs no
// manifest: the chunk is the body, and its hash was checked when it was
// stored (Blob reads it directly). Only its presence and size are checked.
func (a *applier) putManifest(org, project string, e *entry) error {
	if len(e.chunks) == 1 && e.chunks[0] == e.hash {
		if a.decided {
			return a.checkStored(org, project, e)
		}
		var size int64
		found, err := a.chunk(org, project, e.hash, func(data []byte) { size = int64(len(data)) })
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("%w: chunk %x of body %x is neither stored nor in the records", ErrInvalid, e.hash, e.hash)
		case size != e.size:
			return fmt.Errorf("%w: body %x: chunks make %d bytes, the record says %d", ErrInvalid, e.hash, size, e.size)
		}
		return nil
	}
	id := blobID{org, project, e.hash}
	m, known := a.manifests[id]
	if !known {
		a.k2 = appendManifestKey(a.k2[:0], a.p, org, project, e.hash)
		var err error
		known, err = view(a.r, a.k2, func(raw []byte) (err error) {
			m, err = decodeManifest(raw)
			return err
		})
		if err != nil {
			return err
		}
	}
	if known && m.size == e.size && slices.Equal(m.chunks, e.chunks) {
		return nil
	}
	if a.decided {
		if err := a.checkStored(org, project, e); err != nil {
			return err
		}
	} else if err := a.checkBody(org, project, e); err != nil {
		return err
	}
	if known {
		return nil // another valid chunking of a known body
	}
	m = manifest{size: e.size, chunks: slices.Clone(e.chunks)}
	a.manifests[id] = m
	a.k2 = appendManifestKey(a.k2[:0], a.p, org, project, e.hash)
	return a.b.Set(a.k2, m.encode(), nil)
}

// checkBody checks that a body's chunks are stored or in the records and
// that together they are the body (size and hash).
func (a *applier) checkBody(org, project string, e *entry) error {
	// A body that starts with the chunks of one checked before (the next
	// version of an edited item) resumes its hash where they end: they
	// are stored (chunks are only deleted with their partition, which
	// forgets what was checked), and only the chunks from the first that
	// differs are read and hashed.
	var prev *verifiedBody
	if len(e.chunks) >= 2*chunkhash.Every {
		prev = a.verifiedBody(blobID{org, project, e.chunks[0]})
	}
	hs, err := chunkhash.New(e.chunks, prev)
	if err != nil {
		return fmt.Errorf("body %x: %w", e.hash, err)
	}
	for i := hs.Start; i < len(e.chunks); i++ {
		c := e.chunks[i]
		var werr error
		found, err := a.chunk(org, project, c, func(data []byte) { werr = hs.Write(data) })
		if err != nil {
			return err
		}
		if werr != nil {
			return fmt.Errorf("body %x: %w", e.hash, werr)
		}
		if !found {
			return fmt.Errorf("%w: chunk %x of body %x is neither stored nor in the records", ErrInvalid, c, e.hash)
		}
	}
	if hs.Size != e.size {
		return fmt.Errorf("%w: body %x: chunks make %d bytes, the record says %d", ErrInvalid, e.hash, hs.Size, e.size)
	}
	sum, checked := hs.Sum()
	if sum != e.hash {
		return fmt.Errorf("%w: the chunks of body %x hash to %x", ErrInvalid, e.hash, sum)
	}
	if checked != nil {
		a.verified[blobID{org, project, e.chunks[0]}] = checked
	}
	return nil
}

// checkStored checks that a decided body's chunks are stored or in the
// records, without reading them. The chunks it shares with the body
// remembered by its first chunk (the edited item's version before) are
// stored: that body was checked the same way, or by checkBody, and chunks
// are deleted only with their partition, which forgets the bodies. Of the
// others, the ones neither in the records nor remembered as stored are
// looked up.
func (a *applier) checkStored(org, project string, e *entry) error {
	var known [][32]byte
	if len(e.chunks) >= 2*chunkhash.Every {
		if prev := a.verifiedBody(blobID{org, project, e.chunks[0]}); prev != nil {
			known = prev.Chunks
		}
	}
	// Chunks [pre, len-suf) are the ones the remembered body does not
	// have at the same place from either end: around an edit.
	pre, suf := chunkhash.SameEnds(known, e.chunks)
	for _, c := range e.chunks[pre : len(e.chunks)-suf] {
		found, err := a.hasChunk(org, project, c)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: chunk %x of body %x is neither stored nor in the records", ErrInvalid, c, e.hash)
		}
	}
	if len(e.chunks) >= 2*chunkhash.Every {
		a.verified[blobID{org, project, e.chunks[0]}] = chunkhash.Listed(e.chunks)
	}
	return nil
}

// verifiedBody is a body putManifest checked: its chunks and the SHA-256
// states a body that starts with the same chunks resumes from.
type verifiedBody = chunkhash.Checked[[32]byte]

// verifiedBody returns the last body checked, by this call or a committed
// one, whose first chunk is id's; nil if none is remembered.
func (a *applier) verifiedBody(id blobID) *verifiedBody {
	if vb := a.verified[id]; vb != nil {
		return vb
	}
	return a.s.parts[a.p].verified[id]
}

// chunk calls fn with a chunk's bytes, from the call's records or the
// database; found is false if it is in neither.
func (a *applier) chunk(org, project string, h [32]byte, fn func([]byte)) (found bool, err error) {
	if data, ok := a.chunks[blobID{org, project, h}]; ok {
		fn(data)
		return true, nil
	}
	a.k2 = appendChunkKey(a.k2[:0], a.p, org, project, h)
	return view(a.r, a.k2, func(data []byte) error {
		fn(data)
		return nil
	})
}

// hasChunk reports whether a chunk is in the call's records or stored,
// without reading it when the partition remembers it as stored.
func (a *applier) hasChunk(org, project string, h [32]byte) (bool, error) {
	id := blobID{org, project, h}
	if _, ok := a.chunks[id]; ok {
		return true, nil
	}
	if stored, _ := a.s.parts[a.p].chunkStored(id); stored {
		return true, nil
	}
	a.k2 = appendChunkKey(a.k2[:0], a.p, org, project, h)
	return view(a.r, a.k2, func([]byte) error { return nil })
}

// hashIs reports whether s is the lower-case hex of h.
func hashIs(h [32]byte, s string) bool {
	d, ok := decodeHex32(s)
	return ok && d == h
}

func validateProject(org, project string) error {
	if err := schemas.ValidateOrg("org", org); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := schemas.ValidateProject("project", project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// validateVersion checks a version's names, numbers and hashes. Field
// names for error messages are only formatted for an error.
func validateVersion(v *schemas.Version) error {
	if err := validateProject(v.Org, v.Project); err != nil {
		return err
	}
	if err := schemas.ValidateBranch("branch", v.Branch); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if v.Version == 0 || v.Parent != v.Version-1 {
		return fmt.Errorf("%w: version %d with parent %d: versions count from 1 and the parent is the previous one", ErrInvalid, v.Version, v.Parent)
	}
	if v.Base != nil {
		if v.Version != 1 || v.Base.Branch == v.Branch || v.Base.Version == 0 {
			return fmt.Errorf("%w: base %s@%d: only version 1 of a branch has a base, another branch at a version >= 1", ErrInvalid, v.Base.Branch, v.Base.Version)
		}
		if err := schemas.ValidateBranch("base.branch", v.Base.Branch); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	for i := range v.Items {
		c := &v.Items[i]
		if schemas.ValidateCollection("", c.Collection) != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, schemas.ValidateCollection(fmt.Sprintf("items[%d].collection", i), c.Collection))
		}
		if schemas.ValidateItemID("", c.ID) != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, schemas.ValidateItemID(fmt.Sprintf("items[%d].id", i), c.ID))
		}
		switch c.Op {
		case schemas.OpDelete:
		case schemas.OpPut:
			if _, ok := decodeHex32(c.Hash); !ok {
				_, err := parseHash(fmt.Sprintf("items[%d].hash", i), c.Hash)
				return err
			}
			for j, ch := range c.Chunks {
				if _, ok := decodeHex32(ch); !ok {
					_, err := parseHash(fmt.Sprintf("items[%d].chunks[%d]", i, j), ch)
					return err
				}
			}
			if c.Size < 0 {
				return fmt.Errorf("%w: items[%d].size is %d", ErrInvalid, i, c.Size)
			}
		default:
			return fmt.Errorf("%w: items[%d].op is %q, not %q or %q", ErrInvalid, i, c.Op, schemas.OpPut, schemas.OpDelete)
		}
	}
	for i := range v.Mutations {
		if schemas.ValidateClient("", v.Mutations[i].Client) != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, schemas.ValidateClient(fmt.Sprintf("mutations[%d].client", i), v.Mutations[i].Client))
		}
	}
	for client := range v.LastIDs {
		if err := schemas.ValidateClient("lastIds", client); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// parseHash decodes a SHA-256 in lower-case hex (the only spelling, so
// that digests computed from stored hashes match the records').
func parseHash(field, s string) ([32]byte, error) {
	if h, ok := decodeHex32(s); ok {
		return h, nil
	}
	if err := schemas.ValidateHash(field, s); err != nil {
		return [32]byte{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// ValidateHash accepts exactly what decodeHex32 decodes.
	return [32]byte{}, fmt.Errorf("%w: %s: %q is not a SHA-256 in lower-case hex", ErrInvalid, field, s)
}

// view calls fn with a key's value, which is valid only during the call.
func view(r pebble.Reader, key []byte, fn func([]byte) error) (bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = fn(v)
	_ = closer.Close()
	return true, err
}

// get returns a copy of a key's value.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, true, nil
}

func getOffset(r pebble.Reader, key []byte) (int64, bool, error) {
	v, found, err := get(r, key)
	if err != nil || !found {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: offset of %d bytes", ErrCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// readHead returns a branch's latest version, 0 if it has none.
func readHead(r pebble.Reader, p int32, org, project, branch string) (uint64, error) {
	v, found, err := get(r, headKey(p, org, project, branch))
	if err != nil || !found {
		return 0, err
	}
	return decodeUint64(v, "branch head")
}

// readVersionHeader reads the fixed part of a stored version record, or
// ErrCorrupt if it is missing (callers ask only for versions <= head).
func readVersionHeader(r pebble.Reader, p int32, org, project, branch string, v uint64) (versionHeader, error) {
	var h versionHeader
	found, err := view(r, versionKey(p, org, project, branch, v), func(raw []byte) (err error) {
		h, _, err = decodeVersionHeader(raw)
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: version %d of %s/%s branch %s is missing below the head", ErrCorrupt, v, org, project, branch)
	}
	return h, err
}

func readEntry(r pebble.Reader, key []byte) (entry, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, err
	}
	e, err := decodeEntry(v)
	_ = closer.Close()
	return e, err == nil, err
}

// Refused reports whether err is Apply refusing records that do not
// follow what the store holds (ErrGap, ErrConflict, ErrStateHash,
// ErrInvalid, ErrWrongPartition), as opposed to a failure of the
// database: either the store's state or the records are wrong.
func Refused(err error) bool {
	return errors.Is(err, ErrGap) || errors.Is(err, ErrConflict) || errors.Is(err, ErrStateHash) ||
		errors.Is(err, ErrInvalid) || errors.Is(err, ErrWrongPartition)
}
