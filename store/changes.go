package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canon-sync/canon/model"
)

// Changes is how a branch changed from one version to a later one: what
// an incremental sync (Replicache's pull) sends a client that has the
// state at From.
type Changes struct {
	Org, Project, Branch string
	// From is the version the changes start from (0: the empty state
	// before version 1); To is the branch head they lead to.
	From, To uint64
	// StateHash is the state hash at To.
	StateHash string
	// ScalarsFrom and Scalars are the scalars at From and at To.
	ScalarsFrom, Scalars map[string]json.RawMessage
	// Puts are the items whose latest entry was written after From and
	// that exist at To, in (collection, id) order. An item written and
	// rewritten to the same content is listed too.
	Puts []model.ItemRef
	// Deletes are the items that existed at From and do not exist at To,
	// in (collection, id) order.
	Deletes []ItemKey
	// Bodies maps the body hashes of Puts to the bodies, when they were
	// asked for.
	Bodies map[string][]byte

	// The client group asked for, as of To, read in the same snapshot as
	// the changes, so that a client's last id and the versions it
	// produced are never seen apart.
	//
	// GroupKnown reports whether the store knows the group at all: it is
	// bound to a principal or has clients. GroupPrincipal is the
	// principal that owns it ("" if none). GroupLastIDs are the last ids
	// on the branch of the group's clients that have one.
	GroupKnown     bool
	GroupPrincipal string
	GroupLastIDs   map[string]uint64
}

// ChangesOptions say what ChangesSince reads besides the changed items.
type ChangesOptions struct {
	// Bodies: read the bodies of the items put.
	Bodies bool
	// Group: read this client group's owner and its clients' last ids.
	Group string
}

// ItemKey names an item of a branch.
type ItemKey struct {
	Collection string `json:"collection"`
	ID         string `json:"id"`
}

// changesWalkLimit is the largest number of versions ChangesSince walks
// to find the changed items; beyond it, it scans the item index instead.
// Walking costs a read of each version's header and item list, scanning
// one seek per item that ever existed on the branch: a client a few
// versions behind (the usual pull after a poke) gets its changes without
// touching the items that did not change.
const changesWalkLimit = 256

// ChangesSince returns how a branch changed from version from (0: the
// empty state) to its head, with the bodies of the items put if bodies is
// set. The changed items come from the store's item index, never from
// comparing two whole states: when the head is at most a few hundred
// versions past from, from the item lists of the versions in between
// and one point read of the latest index per changed item; otherwise
// from one pass over the branch's MVCC entries, one seek per item that
// ever existed on the branch plus one per item deleted since from,
// whatever the length of the history.
//
// A branch that does not exist has head 0 and no changes; ErrNotFound if
// from is beyond the head (the caller has read the head and decides what
// a client ahead of it gets). With opt.Group, the group's owner and its
// clients' last ids are read in the same snapshot.
func (s *Store) ChangesSince(org, project, branch string, from uint64, opt ChangesOptions) (Changes, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	p := s.PartitionOf(org, project)
	c, err := changesSince(snap, p, org, project, branch, from, opt.Bodies, changesWalkLimit)
	if err == nil && opt.Group != "" {
		err = c.readGroup(snap, p, opt.Group)
	}
	if err != nil {
		return Changes{}, wrapQuery("changes", org, project, branch, err)
	}
	return c, nil
}

func changesSince(r pebble.Reader, p int32, org, project, branch string, from uint64, bodies bool, walkLimit uint64) (Changes, error) {
	head, err := readHead(r, p, org, project, branch)
	if err != nil {
		return Changes{}, err
	}
	if from > head {
		return Changes{}, fmt.Errorf("%w: no version %d (the latest is %d)", ErrNotFound, from, head)
	}
	c := Changes{Org: org, Project: project, Branch: branch, From: from, To: head,
		ScalarsFrom: map[string]json.RawMessage{}, Scalars: map[string]json.RawMessage{}}
	if bodies {
		c.Bodies = map[string][]byte{}
	}
	if head == 0 {
		return c, nil
	}
	h, err := readVersionHeader(r, p, org, project, branch, head)
	if err != nil {
		return Changes{}, err
	}
	if c.Scalars, err = h.decodeScalars(); err != nil {
		return Changes{}, err
	}
	c.StateHash = hexString(h.stateHash)
	if from > 0 {
		hf, err := readVersionHeader(r, p, org, project, branch, from)
		if err != nil {
			return Changes{}, err
		}
		if c.ScalarsFrom, err = hf.decodeScalars(); err != nil {
			return Changes{}, err
		}
	}
	switch {
	case from == head:
	case from == 0:
		// Everything: the latest index holds exactly the items at head.
		err = scanItems(r, p, org, project, branch, nil, head, true, func(collection, id string, e entry) error {
			return c.put(r, p, collection, id, e)
		})
	case head-from <= walkLimit:
		err = c.walk(r, p, from, head)
	default:
		err = c.scan(r, p, from)
	}
	if err != nil {
		return Changes{}, err
	}
	return c, nil
}

// readGroup reads a client group's owner and its clients' last ids on the
// branch.
func (c *Changes) readGroup(r pebble.Reader, p int32, group string) error {
	owner, bound, err := get(r, groupKey(p, c.Org, c.Project, group))
	if err != nil {
		return err
	}
	c.GroupKnown, c.GroupPrincipal = bound, string(owner)
	c.GroupLastIDs = map[string]uint64{}
	prefix := groupClientPrefix(p, c.Org, c.Project, group)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	var clients []string
	for valid := it.First(); valid; valid = it.Next() {
		client, rest, derr := decodeString(it.Key()[len(prefix):])
		if derr != nil || len(rest) != 0 {
			err = fmt.Errorf("%w: group client key %x", ErrCorrupt, it.Key())
			break
		}
		clients = append(clients, client)
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return err
	}
	c.GroupKnown = c.GroupKnown || len(clients) > 0
	for _, client := range clients {
		v, found, err := get(r, lastIDKey(p, c.Org, c.Project, c.Branch, client))
		if err != nil {
			return err
		}
		if !found {
			continue // a client of the group on another branch
		}
		id, err := decodeUint64(v, "last id")
		if err != nil {
			return err
		}
		c.GroupLastIDs[client] = id
	}
	return nil
}

// put adds an item that exists at To, with its body if asked for.
func (c *Changes) put(r pebble.Reader, p int32, collection, id string, e entry) error {
	ref := e.ref(collection, id)
	c.Puts = append(c.Puts, ref)
	if c.Bodies == nil {
		return nil
	}
	if _, ok := c.Bodies[ref.Hash]; ok {
		return nil
	}
	b, err := readBody(r, p, c.Org, c.Project, e.hash, e.size, e.chunks)
	if err != nil {
		return fmt.Errorf("body %s of item %s/%s: %w", ref.Hash, collection, id, err)
	}
	c.Bodies[ref.Hash] = b
	return nil
}

// walk finds the changed items in the item lists of versions from+1 to
// to, then reads each one's latest entry. None of those versions is
// version 1, so none copied a base branch: their item lists are all the
// items they changed.
func (c *Changes) walk(r pebble.Reader, p int32, from, to uint64) error {
	prefix := branchPrefix(p, kindVersion, c.Org, c.Project, c.Branch)
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: appendUint64(bytes.Clone(prefix), from+1),
		UpperBound: appendUint64(bytes.Clone(prefix), to+1),
	})
	if err != nil {
		return err
	}
	changed := map[ItemKey]bool{}
	var keys []ItemKey
	n := uint64(0)
	for valid := it.First(); valid; valid = it.Next() {
		var raw []byte
		if raw, err = it.ValueAndErr(); err != nil {
			break
		}
		n++
		err = versionItems(raw, func(k ItemKey) {
			if !changed[k] {
				changed[k] = true
				keys = append(keys, k)
			}
		})
		if err != nil {
			break
		}
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return err
	}
	if n != to-from {
		return fmt.Errorf("%w: %d version records between %d and %d, want %d", ErrCorrupt, n, from, to, to-from)
	}
	sortItemKeys(keys)
	for _, k := range keys {
		e, found, err := readEntry(r, latestKey(p, c.Org, c.Project, c.Branch, k.Collection, k.ID))
		if err != nil {
			return err
		}
		if found {
			if err := c.put(r, p, k.Collection, k.ID, e); err != nil {
				return err
			}
			continue
		}
		// Gone at To: a deletion if it existed at From (an item put and
		// deleted in between is no change).
		_, existed, err := itemAt(r, p, c.Org, c.Project, c.Branch, k.Collection, k.ID, from)
		if err != nil {
			return err
		}
		if existed {
			c.Deletes = append(c.Deletes, k)
		}
	}
	return nil
}

// scan finds the changed items in one pass over the branch's MVCC
// entries: an item's newest entry comes first, and it changed after from
// if that entry is newer than from. A tombstone is a deletion if the item
// existed at from (one more seek).
func (c *Changes) scan(r pebble.Reader, p int32, from uint64) (err error) {
	prefix := branchPrefix(p, kindItem, c.Org, c.Project, c.Branch)
	n := len(prefix)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for valid := it.First(); valid; {
		k := it.Key()
		collection, id, v, err := decodeItemSuffix(k[n:])
		if err != nil {
			return fmt.Errorf("%w: item key %x", ErrCorrupt, k)
		}
		item := bytes.Clone(k[:len(k)-8])
		if v > from {
			e, err := iterEntry(it)
			if err != nil {
				return err
			}
			if !e.deleted {
				if err := c.put(r, p, collection, id, e); err != nil {
					return err
				}
			} else if it.SeekGE(appendUint64(bytes.Clone(item), ^from)) && bytes.HasPrefix(it.Key(), item) {
				old, err := iterEntry(it)
				if err != nil {
					return err
				}
				if !old.deleted {
					c.Deletes = append(c.Deletes, ItemKey{collection, id})
				}
			}
		}
		valid = it.SeekGE(prefixEnd(item))
	}
	return nil
}

// versionItems calls fn with the collection and id of each item change of
// a stored version record, without decoding the rest of the record (its
// mutations' args can be large).
func versionItems(raw []byte, fn func(ItemKey)) error {
	_, rest, err := decodeVersionHeader(raw)
	if err != nil {
		return err
	}
	d := decoder{b: rest}
	d.str() // org
	d.str() // project
	d.str() // branch
	d.uvarint()
	d.uvarint()
	if d.byte() == 1 {
		d.str()
		d.uvarint()
	}
	if n, ok := d.count(); ok {
		for range n {
			k := ItemKey{Collection: d.str(), ID: d.str()}
			d.str() // op
			d.raw() // meta
			d.hashString()
			d.varint()
			switch d.byte() {
			case chunksOwnHash:
			case chunksListed:
				d.hashStrings()
			default:
				d.fail()
			}
			if d.err != nil {
				break
			}
			fn(k)
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: malformed version record", ErrCorrupt)
	}
	return nil
}

func sortItemKeys(keys []ItemKey) {
	// The order of the index: collection, then id, as byte strings.
	slices.SortFunc(keys, func(a, b ItemKey) int {
		return cmp.Or(cmp.Compare(a.Collection, b.Collection), cmp.Compare(a.ID, b.ID))
	})
}
