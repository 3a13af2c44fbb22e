package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/schemas"
)

// Record is one decoded record of canon.versions: exactly one of Chunk and
// Version is set.
type Record struct {
	Chunk   *schemas.Chunk
	Version *schemas.Version
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
	if err := s.checkPartition(partition); err != nil {
		return err
	}
	if nextOffset < 0 {
		return fmt.Errorf("%w: next offset %d of partition %d is negative", ErrInvalid, nextOffset, partition)
	}
	s.locks[partition].Lock()
	defer s.locks[partition].Unlock()

	// An indexed batch reads its own writes: versions may build on earlier
	// ones of the same call.
	b := s.db.NewIndexedBatch()
	defer b.Close()
	for i, r := range recs {
		if (r.Chunk == nil) == (r.Version == nil) {
			return fmt.Errorf("apply record %d of partition %d: %w: exactly one of Chunk and Version must be set", i, partition, ErrInvalid)
		}
		if r.Chunk == nil {
			continue
		}
		if err := s.applyChunk(b, partition, r.Chunk); err != nil {
			return fmt.Errorf("apply record %d of partition %d: chunk %s of %s/%s: %w", i, partition, r.Chunk.Hash, r.Chunk.Org, r.Chunk.Project, err)
		}
	}
	for i, r := range recs {
		if r.Version == nil {
			continue
		}
		v := r.Version
		if err := s.applyVersion(b, partition, v); err != nil {
			return fmt.Errorf("apply record %d of partition %d: version %d of %s/%s branch %s: %w", i, partition, v.Version, v.Org, v.Project, v.Branch, err)
		}
	}
	ok := offsetKey(partition)
	cur, found, err := getOffset(b, ok)
	if err != nil {
		return fmt.Errorf("apply to partition %d: %w", partition, err)
	}
	if !found || nextOffset > cur {
		if err := b.Set(ok, encodeUint64(uint64(nextOffset)), nil); err != nil {
			return fmt.Errorf("apply to partition %d: %w", partition, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("commit %d records and offset %d of partition %d: %w", len(recs), nextOffset, partition, err)
	}
	return nil
}

func (s *Store) applyChunk(b *pebble.Batch, p int32, c *schemas.Chunk) error {
	if err := validateProject(c.Org, c.Project); err != nil {
		return err
	}
	if q := s.PartitionOf(c.Org, c.Project); q != p {
		return fmt.Errorf("%w: the project is in partition %d", ErrWrongPartition, q)
	}
	h, err := parseHash("hash", c.Hash)
	if err != nil {
		return err
	}
	if sha256.Sum256(c.Data) != h {
		return fmt.Errorf("%w: data of %d bytes does not hash to %s", ErrInvalid, len(c.Data), c.Hash)
	}
	return b.Set(chunkKey(p, c.Org, c.Project, h), c.Data, nil)
}

func (s *Store) applyVersion(b *pebble.Batch, p int32, v *schemas.Version) error {
	if err := validateVersion(v); err != nil {
		return err
	}
	if q := s.PartitionOf(v.Org, v.Project); q != p {
		return fmt.Errorf("%w: the project is in partition %d", ErrWrongPartition, q)
	}
	org, project, branch := v.Org, v.Project, v.Branch
	vk := versionKey(p, org, project, branch, v.Version)
	var h versionHeader
	if found, err := view(b, vk, func(raw []byte) (err error) {
		h, _, err = decodeVersionHeader(raw)
		return err
	}); err != nil {
		return err
	} else if found {
		if stored := hex.EncodeToString(h.stateHash[:]); stored != v.StateHash {
			return fmt.Errorf("%w: two different payloads for version %d: stored state hash %s, record %s", ErrConflict, v.Version, stored, v.StateHash)
		}
		return nil // already applied
	}
	head, err := readHead(b, p, org, project, branch)
	if err != nil {
		return err
	}
	if v.Parent != head {
		return fmt.Errorf("%w: expected version %d (parent %d, the branch head), got version %d with parent %d", ErrGap, head+1, head, v.Version, v.Parent)
	}

	var sum schemas.StateHasher
	switch {
	case v.Base != nil:
		if sum, err = s.copyBase(b, p, v); err != nil {
			return err
		}
	case head > 0:
		h, err := readVersionHeader(b, p, org, project, branch, head)
		if err != nil {
			return err
		}
		sum = h.sum
	}

	for i := range v.Items {
		c := &v.Items[i]
		lk := latestKey(p, org, project, branch, c.Collection, c.ID)
		old, found, err := readEntry(b, lk)
		if err != nil {
			return err
		}
		if found {
			sum.Remove(old.digest(c.Collection, c.ID))
		}
		ik := itemKey(p, org, project, branch, c.Collection, c.ID, v.Version)
		if c.Op == schemas.OpDelete {
			if !found {
				return fmt.Errorf("%w: item %s/%s is deleted but does not exist", ErrInvalid, c.Collection, c.ID)
			}
			if err := b.Set(ik, (&entry{deleted: true}).encode(), nil); err != nil {
				return err
			}
			if err := b.Delete(lk, nil); err != nil {
				return err
			}
			continue
		}
		e := entry{version: v.Version, meta: c.Meta, size: c.Size}
		e.hash, _ = parseHash("", c.Hash) // validated
		e.chunks = make([][32]byte, len(c.Chunks))
		for j, ch := range c.Chunks {
			e.chunks[j], _ = parseHash("", ch)
		}
		if err := s.putManifest(b, p, org, project, &e); err != nil {
			return fmt.Errorf("item %s/%s: %w", c.Collection, c.ID, err)
		}
		sum.Add(e.digest(c.Collection, c.ID))
		enc := e.encode()
		if err := b.Set(ik, enc, nil); err != nil {
			return err
		}
		if err := b.Set(lk, enc, nil); err != nil {
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
	stateHash, _ := parseHash("", computed)
	rec, err := encodeVersionRecord(v, sum, stateHash)
	if err != nil {
		return err
	}
	if err := b.Set(vk, rec, nil); err != nil {
		return err
	}
	if err := b.Set(headKey(p, org, project, branch), encodeUint64(v.Version), nil); err != nil {
		return err
	}
	for i, m := range v.Mutations {
		if ref := m.ArgsRef; ref != nil {
			// Large args are a blob of the project, readable by hash.
			e := entry{size: ref.Size, chunks: make([][32]byte, len(ref.Chunks))}
			var err error
			if e.hash, err = parseHash(fmt.Sprintf("mutations[%d].argsRef.hash", i), ref.Hash); err != nil {
				return err
			}
			for j, ch := range ref.Chunks {
				if e.chunks[j], err = parseHash(fmt.Sprintf("mutations[%d].argsRef.chunks[%d]", i, j), ch); err != nil {
					return err
				}
			}
			if err := s.putManifest(b, p, org, project, &e); err != nil {
				return fmt.Errorf("args of mutation %d of client %s: %w", m.ID, m.Client, err)
			}
		}
		st := MutationStatus{Version: v.Version, Status: m.Status, Error: m.Error}
		if err := b.Set(mutationKey(p, org, project, branch, m.Client, m.ID), st.encode(), nil); err != nil {
			return err
		}
	}
	for client, id := range v.LastIDs {
		if err := b.Set(lastIDKey(p, org, project, branch, client), encodeUint64(id), nil); err != nil {
			return err
		}
	}
	return nil
}

// copyBase starts a new branch from its base: the base branch's items at
// the base version become the new branch's entries at version 1 (the
// version's own Items are applied on top by the caller). It returns the
// base's state sum.
func (s *Store) copyBase(b *pebble.Batch, p int32, v *schemas.Version) (schemas.StateHasher, error) {
	base := *v.Base
	baseHead, err := readHead(b, p, v.Org, v.Project, base.Branch)
	if err != nil {
		return schemas.StateHasher{}, err
	}
	if base.Version > baseHead {
		return schemas.StateHasher{}, fmt.Errorf("%w: base branch %s has no version %d yet (its head is %d)", ErrGap, base.Branch, base.Version, baseHead)
	}
	h, err := readVersionHeader(b, p, v.Org, v.Project, base.Branch, base.Version)
	if err != nil {
		return schemas.StateHasher{}, err
	}
	err = scanItems(b, p, v.Org, v.Project, base.Branch, nil, base.Version, base.Version == baseHead,
		func(collection, id string, e entry) error {
			e.version = v.Version
			enc := e.encode()
			if err := b.Set(itemKey(p, v.Org, v.Project, v.Branch, collection, id, v.Version), enc, nil); err != nil {
				return err
			}
			return b.Set(latestKey(p, v.Org, v.Project, v.Branch, collection, id), enc, nil)
		})
	if err != nil {
		return schemas.StateHasher{}, fmt.Errorf("copy base %s@%d: %w", base.Branch, base.Version, err)
	}
	return h.sum, nil
}

// putManifest records how a body is made of chunks, once per body. It
// checks that every chunk of the entry is there and that together they are
// the body (size and hash), so that no read meets a body it cannot
// rebuild; a body already known with the same chunks is not checked again.
func (s *Store) putManifest(b *pebble.Batch, p int32, org, project string, e *entry) error {
	mk := manifestKey(p, org, project, e.hash)
	raw, known, err := get(b, mk)
	if err != nil {
		return err
	}
	if known {
		m, err := decodeManifest(raw)
		if err != nil {
			return err
		}
		if m.size == e.size && slices.Equal(m.chunks, e.chunks) {
			return nil
		}
	}
	h := sha256.New()
	var size int64
	for _, c := range e.chunks {
		v, closer, err := b.Get(chunkKey(p, org, project, c))
		if errors.Is(err, pebble.ErrNotFound) {
			return fmt.Errorf("%w: chunk %x of body %x is neither stored nor in the records", ErrInvalid, c, e.hash)
		}
		if err != nil {
			return err
		}
		h.Write(v)
		size += int64(len(v))
		_ = closer.Close()
	}
	if size != e.size {
		return fmt.Errorf("%w: body %x: chunks make %d bytes, the record says %d", ErrInvalid, e.hash, size, e.size)
	}
	if !bytes.Equal(h.Sum(nil), e.hash[:]) {
		return fmt.Errorf("%w: the chunks of body %x hash to %x", ErrInvalid, e.hash, h.Sum(nil))
	}
	if known {
		return nil // another valid chunking of a known body
	}
	m := manifest{size: e.size, chunks: e.chunks}
	return b.Set(mk, m.encode(), nil)
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
		if err := schemas.ValidateCollection(fmt.Sprintf("items[%d].collection", i), c.Collection); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := schemas.ValidateItemID(fmt.Sprintf("items[%d].id", i), c.ID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		switch c.Op {
		case schemas.OpDelete:
		case schemas.OpPut:
			if _, err := parseHash(fmt.Sprintf("items[%d].hash", i), c.Hash); err != nil {
				return err
			}
			for j, ch := range c.Chunks {
				if _, err := parseHash(fmt.Sprintf("items[%d].chunks[%d]", i, j), ch); err != nil {
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
		if err := schemas.ValidateClient(fmt.Sprintf("mutations[%d].client", i), v.Mutations[i].Client); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
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
	var h [32]byte
	if err := schemas.ValidateHash(field, s); err != nil {
		return h, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	_, _ = hex.Decode(h[:], []byte(s))
	return h, nil
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
