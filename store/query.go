package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// State is a branch's whole state at a version.
type State struct {
	Org, Project, Branch string
	Version              uint64
	// TS is the version's timestamp (ms), StateHash its state hash.
	TS        int64
	StateHash string
	Scalars   map[string]json.RawMessage
	// Collections maps each collection to its items, sorted by id.
	Collections map[string][]model.ItemRef
	// Bodies maps body hashes to bodies, when they were asked for.
	Bodies map[string][]byte
}

// Branch is a branch of a project and its latest version.
type Branch struct {
	Name    string `json:"name"`
	Version uint64 `json:"version"`
}

// Project names a project.
type Project struct {
	Org     string `json:"org"`
	Project string `json:"project"`
}

// DefaultVersionsLimit is the page size of Versions when limit <= 0.
const DefaultVersionsLimit = 100

// Head implements model.Reader: the branch's latest version, its scalars
// and state sum; Version 0 when the branch does not exist. Two point reads.
func (s *Store) Head(org, project, branch string) (model.Head, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	head, err := readHead(snap, p, org, project, branch)
	if err != nil || head == 0 {
		return model.Head{}, wrapQuery("head", org, project, branch, err)
	}
	h, err := headAt(snap, p, org, project, branch, head)
	return h, wrapQuery("head", org, project, branch, err)
}

// HeadAt implements model.Reader: the branch as of version v; ok is false
// when the branch has no version v (v = 0 included). One point read.
func (s *Store) HeadAt(org, project, branch string, v uint64) (model.Head, bool, error) {
	if v == 0 {
		return model.Head{}, false, nil
	}
	var h model.Head
	found, err := view(s.db, versionKey(s.PartitionOf(org, project), org, project, branch, v), func(raw []byte) (err error) {
		h, err = headOf(v, raw)
		return err
	})
	if err != nil || !found {
		return model.Head{}, false, wrapQuery("head", org, project, branch, err)
	}
	return h, true, nil
}

func headAt(r pebble.Reader, p int32, org, project, branch string, v uint64) (model.Head, error) {
	h, err := readVersionHeader(r, p, org, project, branch, v)
	if err != nil {
		return model.Head{}, err
	}
	return h.head(v)
}

func headOf(v uint64, raw []byte) (model.Head, error) {
	h, _, err := decodeVersionHeader(raw)
	if err != nil {
		return model.Head{}, err
	}
	return h.head(v)
}

func (h *versionHeader) head(v uint64) (model.Head, error) {
	scalars, err := h.decodeScalars()
	if err != nil {
		return model.Head{}, err
	}
	return model.Head{Version: v, Scalars: scalars, State: h.sum}, nil
}

// ItemRef implements model.Reader: an item at the branch's latest
// version. One point read of the latest index.
func (s *Store) ItemRef(org, project, branch, collection, id string) (model.ItemRef, bool, error) {
	p := s.PartitionOf(org, project)
	e, found, err := readEntry(s.db, latestKey(p, org, project, branch, collection, id))
	if err != nil || !found {
		return model.ItemRef{}, false, wrapQuery("item", org, project, branch, err)
	}
	return e.ref(collection, id), true, nil
}

// ItemRefAt implements model.Reader: an item as of version v of the
// branch; ok is false when the item did not exist at v (v = 0, the empty
// state before version 1, included). ErrNotFound if v is beyond the
// branch's head. One SeekGE on the item's MVCC entries.
func (s *Store) ItemRefAt(org, project, branch, collection, id string, v uint64) (model.ItemRef, bool, error) {
	if v == 0 {
		return model.ItemRef{}, false, nil
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	if _, _, err := resolveVersion(snap, p, org, project, branch, v); err != nil {
		return model.ItemRef{}, false, wrapQuery("item", org, project, branch, err)
	}
	e, found, err := itemAt(snap, p, org, project, branch, collection, id, v)
	if err != nil || !found {
		return model.ItemRef{}, false, wrapQuery("item", org, project, branch, err)
	}
	return e.ref(collection, id), true, nil
}

// Body implements model.Reader: a body by its content hash within the
// project (see Blob).
func (s *Store) Body(org, project, hash string) ([]byte, error) { return s.Blob(org, project, hash) }

// HasChunk implements model.Reader: whether the project's namespace holds
// a chunk. One point read.
func (s *Store) HasChunk(org, project, hash string) (bool, error) {
	h, err := parseHash("hash", hash)
	if err != nil {
		return false, err
	}
	p := s.PartitionOf(org, project)
	ps, id := &s.parts[p], blobID{org, project, h}
	stored, gen := ps.chunkStored(id)
	if stored {
		return true, nil
	}
	_, closer, err := s.db.Get(chunkKey(p, org, project, h))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read chunk %s of %s/%s: %w", hash, org, project, err)
	}
	_ = closer.Close()
	ps.rememberChunk(id, gen)
	return true, nil
}

// LastID implements model.Reader: the last mutation id of a client on a
// branch, 0 if none. One point read.
func (s *Store) LastID(org, project, branch, client string) (uint64, error) {
	v, found, err := get(s.db, lastIDKey(s.PartitionOf(org, project), org, project, branch, client))
	if err != nil || !found {
		return 0, wrapQuery("last id", org, project, branch, err)
	}
	id, err := decodeUint64(v, "last id")
	return id, wrapQuery("last id", org, project, branch, err)
}

// Blob returns the bytes whose SHA-256 is hash within the project: an item
// body (reassembled from its chunks) or a single chunk. The bytes are
// checked against the hash (ErrCorrupt); ErrNotFound if the project holds
// neither. Point reads: the manifest and each chunk.
func (s *Store) Blob(org, project, hash string) ([]byte, error) {
	h, err := parseHash("hash", hash)
	if err != nil {
		return nil, err
	}
	p := s.PartitionOf(org, project)
	// A chunk of hash h is the blob itself (a body of one chunk has no
	// manifest, see putManifest): one read, which needs no snapshot.
	v, found, err := get(s.db, chunkKey(p, org, project, h))
	if err == nil && found && sha256.Sum256(v) != h {
		err = fmt.Errorf("%w: chunk of %d bytes does not hash to its key", ErrCorrupt, len(v))
	}
	if err == nil && !found {
		// A manifest and its chunks, read in one snapshot.
		snap := s.db.NewSnapshot()
		defer snap.Close()
		v, err = readManifestBlob(snap, p, org, project, h)
	}
	if err != nil {
		return nil, fmt.Errorf("read blob %s of %s/%s: %w", hash, org, project, err)
	}
	return v, nil
}

// readManifestBlob reads a body made of chunks by its manifest.
func readManifestBlob(r pebble.Reader, p int32, org, project string, h [32]byte) ([]byte, error) {
	raw, found, err := get(r, manifestKey(p, org, project, h))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return nil, err
	}
	return readBody(r, p, org, project, h, m.size, m.chunks)
}

// readBody concatenates a body's chunks and checks its hash. Item entries
// carry their body's chunk list, so reading an item's body needs no
// manifest.
func readBody(r pebble.Reader, p int32, org, project string, h [32]byte, size int64, chunks [][32]byte) ([]byte, error) {
	body := make([]byte, 0, size)
	for _, c := range chunks {
		v, closer, err := r.Get(chunkKey(p, org, project, c))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, fmt.Errorf("%w: chunk %x of body %x is missing", ErrCorrupt, c, h)
		}
		if err != nil {
			return nil, err
		}
		body = append(body, v...)
		_ = closer.Close()
	}
	if sha256.Sum256(body) != h {
		return nil, fmt.Errorf("%w: the %d bytes of body %x do not hash to it", ErrCorrupt, len(body), h)
	}
	return body, nil
}

// Latest returns a branch's latest state: scalars and every item's
// ItemRef, without bodies. A scan of the branch's latest index.
func (s *Store) Latest(org, project, branch string) (State, error) {
	return s.StateAt(org, project, branch, 0, false)
}

// StateAt returns a branch's whole state at version v (0: the latest),
// with the bodies if bodies is set. At the latest version it scans the
// latest index; at an older one it makes two seeks per item that ever
// existed on the branch, whatever the length of its history. ErrNotFound
// if the branch has no version v.
func (s *Store) StateAt(org, project, branch string, v uint64, bodies bool) (State, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	at, head, err := resolveVersion(snap, p, org, project, branch, v)
	if err != nil {
		return State{}, wrapQuery("state", org, project, branch, err)
	}
	h, err := readVersionHeader(snap, p, org, project, branch, at)
	if err != nil {
		return State{}, wrapQuery("state", org, project, branch, err)
	}
	scalars, err := h.decodeScalars()
	if err != nil {
		return State{}, wrapQuery("state", org, project, branch, err)
	}
	st := State{
		Org: org, Project: project, Branch: branch, Version: at,
		TS: h.ts, StateHash: hex.EncodeToString(h.stateHash[:]), Scalars: scalars,
		Collections: map[string][]model.ItemRef{},
	}
	if bodies {
		st.Bodies = map[string][]byte{}
	}
	err = scanItems(snap, p, org, project, branch, nil, at, at == head, func(collection, id string, e entry) error {
		st.Collections[collection] = append(st.Collections[collection], e.ref(collection, id))
		if !bodies {
			return nil
		}
		hs := hex.EncodeToString(e.hash[:])
		if _, ok := st.Bodies[hs]; ok {
			return nil
		}
		b, err := readBody(snap, p, org, project, e.hash, e.size, e.chunks)
		if err != nil {
			return fmt.Errorf("body %s of item %s/%s: %w", hs, collection, id, err)
		}
		st.Bodies[hs] = b
		return nil
	})
	if err != nil {
		return State{}, wrapQuery("state", org, project, branch, err)
	}
	return st, nil
}

// Items returns the ItemRefs of one collection at version at (0: the
// latest), sorted by id. A scan of the collection in the latest index, or
// two seeks per item of the collection for an older version. ErrNotFound
// if the branch has no version at.
func (s *Store) Items(org, project, branch, collection string, at uint64) ([]model.ItemRef, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	v, head, err := resolveVersion(snap, p, org, project, branch, at)
	if err != nil {
		return nil, wrapQuery("items", org, project, branch, err)
	}
	var refs []model.ItemRef
	err = scanItems(snap, p, org, project, branch, &collection, v, v == head, func(collection, id string, e entry) error {
		refs = append(refs, e.ref(collection, id))
		return nil
	})
	return refs, wrapQuery("items", org, project, branch, err)
}

// Item returns one item and its body at version at (0: the latest); ok is
// false if the item does not exist at that version. One point read at the
// latest version, one SeekGE on the item's MVCC entries for an older one,
// whatever the length of its history; then the body's manifest and
// chunks. ErrNotFound if the branch has no version at.
func (s *Store) Item(org, project, branch, collection, id string, at uint64) (model.ItemRef, []byte, bool, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	v, head, err := resolveVersion(snap, p, org, project, branch, at)
	if err != nil {
		return model.ItemRef{}, nil, false, wrapQuery("item", org, project, branch, err)
	}
	var e entry
	var found bool
	if v == head {
		e, found, err = readEntry(snap, latestKey(p, org, project, branch, collection, id))
	} else {
		e, found, err = itemAt(snap, p, org, project, branch, collection, id, v)
	}
	if err != nil || !found {
		return model.ItemRef{}, nil, false, wrapQuery("item", org, project, branch, err)
	}
	body, err := readBody(snap, p, org, project, e.hash, e.size, e.chunks)
	if err != nil {
		return model.ItemRef{}, nil, false, wrapQuery("item", org, project, branch, fmt.Errorf("body of %s/%s: %w", collection, id, err))
	}
	return e.ref(collection, id), body, true, nil
}

// itemAt is the item's newest MVCC entry at or below version v: one SeekGE,
// since entries of an item are sorted by descending version.
func itemAt(r pebble.Reader, p int32, org, project, branch, collection, id string, v uint64) (entry, bool, error) {
	prefix := itemPrefix(p, org, project, branch, collection, id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return entry{}, false, err
	}
	var e entry
	found := false
	if it.SeekGE(appendUint64(prefix, ^v)) {
		var raw []byte
		if raw, err = it.ValueAndErr(); err == nil {
			e, err = decodeEntry(raw)
			found = err == nil && !e.deleted
		}
	}
	return e, found, errors.Join(err, it.Close())
}

// resolveVersion turns a requested version (0: latest) into one the branch
// has, and returns the branch head.
func resolveVersion(r pebble.Reader, p int32, org, project, branch string, v uint64) (at, head uint64, err error) {
	head, err = readHead(r, p, org, project, branch)
	if err != nil {
		return 0, 0, err
	}
	if head == 0 {
		return 0, 0, fmt.Errorf("%w: no such branch", ErrNotFound)
	}
	if v == 0 {
		return head, head, nil
	}
	if v > head {
		return 0, 0, fmt.Errorf("%w: no version %d (the latest is %d)", ErrNotFound, v, head)
	}
	return v, head, nil
}

// scanItems calls fn for each item of a branch (of one collection if
// collection is set) that exists at version at, in (collection, id) order.
// With latest (at is the head) it scans the latest index; otherwise, per
// item, it seeks to the newest entry at or below at, then to the next
// item: two seeks per item, never a walk through an item's history.
func scanItems(r pebble.Reader, p int32, org, project, branch string, collection *string, at uint64, latest bool, fn func(collection, id string, e entry) error) (err error) {
	kind := kindItem
	if latest {
		kind = kindLatest
	}
	prefix := branchPrefix(p, kind, org, project, branch)
	n := len(prefix)
	if collection != nil {
		prefix = appendString(prefix, *collection)
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()

	if latest {
		for valid := it.First(); valid; valid = it.Next() {
			coll, id, rest, err := decodeCollectionID(it.Key()[n:])
			if err != nil || len(rest) != 0 {
				return fmt.Errorf("%w: latest index key %x", ErrCorrupt, it.Key())
			}
			e, err := iterEntry(it)
			if err != nil {
				return err
			}
			if err := fn(coll, id, e); err != nil {
				return err
			}
		}
		return nil
	}

	for valid := it.First(); valid; {
		k := it.Key()
		coll, id, v, err := decodeItemSuffix(k[n:])
		if err != nil {
			return fmt.Errorf("%w: item key %x", ErrCorrupt, k)
		}
		item := bytes.Clone(k[:len(k)-8])
		if v > at {
			if !it.SeekGE(appendUint64(bytes.Clone(item), ^at)) {
				break
			}
			if k = it.Key(); !bytes.HasPrefix(k, item) {
				continue // no entry at or below at: k is the next item's newest
			}
		}
		e, err := iterEntry(it)
		if err != nil {
			return err
		}
		if !e.deleted {
			if err := fn(coll, id, e); err != nil {
				return err
			}
		}
		valid = it.SeekGE(prefixEnd(item))
	}
	return nil
}

func iterEntry(it *pebble.Iterator) (entry, error) {
	raw, err := it.ValueAndErr()
	if err != nil {
		return entry{}, err
	}
	return decodeEntry(raw)
}

// Versions returns up to limit versions of a branch from version from
// (0 or 1: the first) in order, with their mutations. limit <= 0 means
// DefaultVersionsLimit. One seek, then a scan of limit records.
func (s *Store) Versions(org, project, branch string, from uint64, limit int) ([]schemas.Version, error) {
	if limit <= 0 {
		limit = DefaultVersionsLimit
	}
	p := s.PartitionOf(org, project)
	prefix := branchPrefix(p, kindVersion, org, project, branch)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, wrapQuery("versions", org, project, branch, err)
	}
	var out []schemas.Version
	for valid := it.SeekGE(appendUint64(bytes.Clone(prefix), max(from, 1))); valid && len(out) < limit; valid = it.Next() {
		var raw []byte
		if raw, err = it.ValueAndErr(); err != nil {
			break
		}
		var v schemas.Version
		if v, _, err = decodeVersionRecord(raw); err != nil {
			break
		}
		out = append(out, v)
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return nil, wrapQuery("versions", org, project, branch, err)
	}
	return out, nil
}

// Mutation reports whether mutation id of client was applied or recorded
// with an error on a branch, in which version and with what status. One
// point read.
func (s *Store) Mutation(org, project, branch, client string, id uint64) (MutationStatus, bool, error) {
	raw, found, err := get(s.db, mutationKey(s.PartitionOf(org, project), org, project, branch, client, id))
	if err != nil || !found {
		return MutationStatus{}, false, wrapQuery("mutation", org, project, branch, err)
	}
	m, err := decodeMutationStatus(raw)
	if err != nil {
		return MutationStatus{}, false, wrapQuery("mutation", org, project, branch, err)
	}
	return m, true, nil
}

// Offset returns the next offset of canon.versions to read for a
// partition: everything before it is in the store. ok is false when the
// store holds nothing of the partition. One point read.
func (s *Store) Offset(partition int32) (int64, bool, error) {
	if err := s.checkPartition(partition); err != nil {
		return 0, false, err
	}
	o, ok, err := getOffset(s.db, offsetKey(partition))
	if err != nil {
		return 0, false, fmt.Errorf("read offset of partition %d: %w", partition, err)
	}
	return o, ok, nil
}

// LastSource returns the highest source offset (in canon.mutations) of
// the versions the store applied for a partition; ok is false when it
// applied none, or when the store was built before it kept the offset
// (then scan the branches' latest versions). One point read.
func (s *Store) LastSource(partition int32) (int64, bool, error) {
	if err := s.checkPartition(partition); err != nil {
		return 0, false, err
	}
	o, ok, err := getOffset(s.db, sourceKey(partition))
	if err != nil {
		return 0, false, fmt.Errorf("read the last source offset of partition %d: %w", partition, err)
	}
	return o, ok, nil
}

// Branches returns a project's branches and their latest versions, sorted
// by name. A scan of the project's branch heads.
func (s *Store) Branches(org, project string) ([]Branch, error) {
	prefix := projectPrefix(s.PartitionOf(org, project), kindHead, org, project)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list branches of %s/%s: %w", org, project, err)
	}
	var out []Branch
	for valid := it.First(); valid; valid = it.Next() {
		name, rest, derr := decodeString(it.Key()[len(prefix):])
		if derr != nil || len(rest) != 0 {
			err = fmt.Errorf("%w: head key %x", ErrCorrupt, it.Key())
			break
		}
		var raw []byte
		if raw, err = it.ValueAndErr(); err != nil {
			break
		}
		var v uint64
		if v, err = decodeUint64(raw, "branch head"); err != nil {
			break
		}
		out = append(out, Branch{Name: name, Version: v})
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return nil, fmt.Errorf("list branches of %s/%s: %w", org, project, err)
	}
	return out, nil
}

// Projects returns the projects a partition holds, sorted. One seek per
// project.
func (s *Store) Projects(partition int32) ([]Project, error) {
	if err := s.checkPartition(partition); err != nil {
		return nil, err
	}
	prefix := append(partitionPrefix(partition), kindHead)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list projects of partition %d: %w", partition, err)
	}
	var out []Project
	for valid := it.First(); valid; {
		rest := it.Key()[len(prefix):]
		org, rest, derr := decodeString(rest)
		var project string
		if derr == nil {
			project, _, derr = decodeString(rest)
		}
		if derr != nil {
			err = fmt.Errorf("%w: head key %x", ErrCorrupt, it.Key())
			break
		}
		out = append(out, Project{Org: org, Project: project})
		valid = it.SeekGE(prefixEnd(projectPrefix(partition, kindHead, org, project)))
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return nil, fmt.Errorf("list projects of partition %d: %w", partition, err)
	}
	return out, nil
}

func wrapQuery(what, org, project, branch string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("read %s of %s/%s branch %s: %w", what, org, project, branch, err)
}
