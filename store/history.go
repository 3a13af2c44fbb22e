package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/model"
)

// ItemChange is one version that wrote or deleted an item.
type ItemChange struct {
	// Version is the branch version of the change, TS its timestamp (ms).
	Version uint64
	TS      int64
	// Deleted is set for a deletion; Ref is then empty but for the
	// collection and id.
	Deleted bool
	// Ref is the item as the version wrote it (Ref.Version == Version).
	Ref model.ItemRef
}

// ItemHistory is a page of the changes of one item on a branch.
type ItemHistory struct {
	// Head is the branch's latest version, read in the same snapshot.
	Head uint64
	// Changes are newest first.
	Changes []ItemChange
	// More is set when older changes remain: ask again with before set
	// to the version of the last change.
	More bool
}

// DefaultHistoryLimit is the page size of ItemHistory when limit <= 0.
const DefaultHistoryLimit = 100

// ItemHistory returns the versions of a branch that wrote or deleted an
// item, newest first: the changes older than version before (0: all), at
// most limit of them (<= 0: DefaultHistoryLimit). On a branch made by
// branch.create, the items it inherited are written by its version 1.
// ErrNotFound if the branch does not exist; an item that never existed
// has no changes. One seek on the item's MVCC entries, then one entry
// and one version header per change, whatever the length of the rest of
// the branch's history.
func (s *Store) ItemHistory(org, project, branch, collection, id string, before uint64, limit int) (ItemHistory, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	_, head, err := resolveVersion(snap, p, org, project, branch, 0)
	if err != nil {
		return ItemHistory{}, wrapQuery("item history", org, project, branch, err)
	}
	h := ItemHistory{Head: head}
	if before == 1 {
		return h, nil // nothing is older than version 1
	}
	err = itemHistory(snap, p, org, project, branch, collection, id, before, limit, &h)
	if err != nil {
		return ItemHistory{}, wrapQuery("item history", org, project, branch, fmt.Errorf("%s/%s: %w", collection, id, err))
	}
	return h, nil
}

func itemHistory(r pebble.Reader, p int32, org, project, branch, collection, id string, before uint64, limit int, h *ItemHistory) (err error) {
	prefix := itemPrefix(p, org, project, branch, collection, id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	valid := it.First()
	if before > 0 {
		// Entries sort newest first: the first one older than before.
		valid = it.SeekGE(appendUint64(bytes.Clone(prefix), ^(before - 1)))
	}
	for ; valid; valid = it.Next() {
		if len(h.Changes) == limit {
			h.More = true
			return nil
		}
		k := it.Key()
		nv, err := decodeUint64(k[len(prefix):], "item key version")
		if err != nil {
			return err
		}
		v := ^nv
		e, err := iterEntry(it)
		if err != nil {
			return err
		}
		hdr, err := readVersionHeader(r, p, org, project, branch, v)
		if err != nil {
			return fmt.Errorf("version %d: %w", v, err)
		}
		c := ItemChange{Version: v, TS: hdr.ts, Deleted: e.deleted, Ref: model.ItemRef{Collection: collection, ID: id}}
		if !e.deleted {
			c.Ref = e.ref(collection, id)
		}
		h.Changes = append(h.Changes, c)
	}
	return nil
}

// OrgProjects returns the projects of one org that a partition holds,
// sorted by name, starting after the project named after ("" : from the
// first), at most limit of them (<= 0: all). One seek per project listed.
func (s *Store) OrgProjects(partition int32, org, after string, limit int) ([]Project, error) {
	if err := s.checkPartition(partition); err != nil {
		return nil, err
	}
	prefix := appendString(append(partitionPrefix(partition), kindHead), org)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list projects of %s in partition %d: %w", org, partition, err)
	}
	var out []Project
	valid := it.First()
	if after != "" {
		valid = it.SeekGE(prefixEnd(appendString(bytes.Clone(prefix), after)))
	}
	for valid && (limit <= 0 || len(out) < limit) {
		project, _, derr := decodeString(it.Key()[len(prefix):])
		if derr != nil {
			err = fmt.Errorf("%w: head key %x", ErrCorrupt, it.Key())
			break
		}
		out = append(out, Project{Org: org, Project: project})
		valid = it.SeekGE(prefixEnd(projectPrefix(partition, kindHead, org, project)))
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return nil, fmt.Errorf("list projects of %s in partition %d: %w", org, partition, err)
	}
	return out, nil
}
