package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/canon-sync/canon/schemas"
)

type itemKey struct{ collection, id string }

// itemState is an item as the Decider knows it: from the Reader (body
// loaded on demand) or written in the overlay.
type itemState struct {
	// version is the branch version that wrote the state (overlay entries).
	version uint64
	// deleted marks an overlay entry that deletes the item.
	deleted bool
	meta    json.RawMessage // canonical
	hash    string
	size    int64
	chunks  []string // nil until known
	body    []byte   // canonical; nil until loaded
	// digest is the item's state digest, set on the overlay's entries
	// (Decider.apply) for when they are replaced.
	digest    [32]byte
	hasDigest bool
}

// txItem is an item a mutation touched: its state before the mutation and
// its current state.
type txItem struct {
	key     itemKey
	orig    itemState
	origOK  bool
	cur     itemState
	curOK   bool
	written bool
}

// notFoundError is the error of Tx.Get and Tx.Delete for a missing item.
type notFoundError struct{ key itemKey }

func (e *notFoundError) Error() string {
	// The overlay and the store know of a deletion only as an absence, and
	// a message may not depend on where a batch was cut: no version here.
	return fmt.Sprintf("item %s/%s does not exist (deleted or never created)", e.key.collection, e.key.id)
}

func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// tx is the Tx of one mutation: the branch at the Decider's head, plus the
// mutation's own writes, which the Decider keeps only if the mutator
// returns nil.
type tx struct {
	d   *Decider
	bs  *branchState
	mut schemas.Mutation
	now time.Time

	scalars        map[string]json.RawMessage // shared until the first SetScalar
	scalarsOwned   bool
	scalarsChanged bool

	items []*txItem
	index map[itemKey]*txItem // once items is long

	// Most mutations touch an item or two: their txItems, and the lists
	// of them, live in the tx rather than in allocations of their own.
	inline  [1]txItem
	nInline int
	itemBuf [4]*txItem
	written [4]*txItem // for Decider.collect

	// err is the first Reader failure: the mutation is then not decided
	// at all, whatever the mutator made of the error.
	err error
	// done is set when the mutator has returned: a Tx it kept is dead.
	done bool
}

var errTxDone = errors.New("the Tx is used after its mutator returned")

var _ Tx = (*tx)(nil)

func (t *tx) Now() time.Time              { return t.now }
func (t *tx) Mutation() *schemas.Mutation { return &t.mut }

func (t *tx) Scalar(name string) (json.RawMessage, bool) {
	v, ok := t.scalars[name]
	if !ok {
		return nil, false
	}
	return clone(v), true
}

func (t *tx) SetScalar(name string, value json.RawMessage) error {
	if t.done {
		return errTxDone
	}
	if err := schemas.ValidateScalarName("name", name); err != nil {
		return fmt.Errorf("set scalar: %w", err)
	}
	var canon json.RawMessage
	if value != nil && !isJSONNull(value) {
		var err error
		if canon, err = Canonical(value); err != nil {
			return fmt.Errorf("set scalar %s: %w", name, err)
		}
	}
	t.setScalar(name, canon)
	return nil
}

// setScalar sets a valid scalar to a canonical value; nil or null deletes
// it.
func (t *tx) setScalar(name string, canon json.RawMessage) {
	if !t.scalarsOwned {
		m := make(map[string]json.RawMessage, len(t.scalars)+1)
		for k, v := range t.scalars {
			m[k] = v
		}
		t.scalars, t.scalarsOwned = m, true
	}
	if canon == nil || string(canon) == "null" {
		delete(t.scalars, name)
	} else {
		t.scalars[name] = canon
	}
	t.scalarsChanged = true
}

func (t *tx) Get(collection, id string) (Item, error) {
	it, err := t.item(collection, id)
	if err != nil {
		return Item{}, err
	}
	if !it.curOK {
		return Item{}, &notFoundError{it.key}
	}
	body, err := t.body(&it.cur)
	if err != nil {
		return Item{}, err
	}
	// Copies: a mutator that edits what it got must not edit the overlay.
	return Item{Meta: clone(it.cur.meta), Data: clone(body)}, nil
}

func (t *tx) Put(collection, id string, item Item) error {
	if t.done {
		return errTxDone
	}
	if err := validateTarget(collection, id); err != nil {
		return fmt.Errorf("put item: %w", err)
	}
	meta := json.RawMessage("{}")
	if item.Meta != nil {
		var err error
		if meta, err = Canonical(item.Meta); err != nil {
			return fmt.Errorf("put item %s/%s: meta: %w", collection, id, err)
		}
	}
	if item.Data == nil {
		return fmt.Errorf("put item %s/%s: data is required (JSON null is a value)", collection, id)
	}
	data, err := Canonical(item.Data)
	if err != nil {
		return fmt.Errorf("put item %s/%s: data: %w", collection, id, err)
	}
	it, err := t.item(collection, id)
	if err != nil {
		return err
	}
	return t.put(it, meta, data)
}

func (t *tx) Delete(collection, id string) error {
	it, err := t.item(collection, id)
	if err != nil {
		return err
	}
	if !it.curOK {
		return &notFoundError{it.key}
	}
	it.cur, it.curOK, it.written = itemState{}, false, true
	return nil
}

func validateTarget(collection, id string) error {
	if err := schemas.ValidateCollection("collection", collection); err != nil {
		return err
	}
	return schemas.ValidateItemID("id", id)
}

// put writes canonical meta and data to an item, within the limits.
func (t *tx) put(it *txItem, meta, data []byte) error {
	if firstByte(meta) != '{' {
		return &CodedError{Code: CodeInvalidArgs, Err: fmt.Errorf("item %s/%s: meta must be a JSON object, not %s", it.key.collection, it.key.id, jsonKind(meta))}
	}
	lim := t.d.limits
	if len(meta) > lim.MaxMetaBytes {
		return &CodedError{Code: CodeTooLarge, Err: fmt.Errorf("item %s/%s: meta is %d bytes of canonical JSON, over the limit of %d bytes (MaxMetaBytes)",
			it.key.collection, it.key.id, len(meta), lim.MaxMetaBytes)}
	}
	if len(data) > lim.MaxDataBytes {
		return &CodedError{Code: CodeTooLarge, Err: fmt.Errorf("item %s/%s: data is %d bytes of canonical JSON, over the limit of %d bytes (MaxDataBytes)",
			it.key.collection, it.key.id, len(data), lim.MaxDataBytes)}
	}
	var prevHash string
	var prev []byte
	if it.curOK {
		prevHash, prev = it.cur.hash, it.cur.body
	}
	st := itemState{meta: meta, hash: t.d.blobs.bodyHash(data, prevHash, prev), size: int64(len(data)), body: data}
	if it.curOK && it.cur.hash == st.hash {
		st.chunks = it.cur.chunks // same body: same chunks
	}
	it.cur, it.curOK, it.written = st, true, true
	return nil
}

// putMeta writes canonical meta to an existing item, keeping its body.
func (t *tx) putMeta(it *txItem, meta []byte) error {
	if firstByte(meta) != '{' {
		return &CodedError{Code: CodeInvalidArgs, Err: fmt.Errorf("item %s/%s: meta must be a JSON object, not %s", it.key.collection, it.key.id, jsonKind(meta))}
	}
	if len(meta) > t.d.limits.MaxMetaBytes {
		return &CodedError{Code: CodeTooLarge, Err: fmt.Errorf("item %s/%s: meta is %d bytes of canonical JSON, over the limit of %d bytes (MaxMetaBytes)",
			it.key.collection, it.key.id, len(meta), t.d.limits.MaxMetaBytes)}
	}
	st := it.cur
	st.meta = meta
	it.cur, it.written = st, true
	return nil
}

// item returns the mutation's view of an item, loading it on first use.
func (t *tx) item(collection, id string) (*txItem, error) {
	if t.done {
		return nil, errTxDone
	}
	if t.err != nil {
		return nil, t.err
	}
	k := itemKey{collection, id}
	if t.index != nil {
		if it, ok := t.index[k]; ok {
			return it, nil
		}
	} else {
		for _, it := range t.items {
			if it.key == k {
				return it, nil
			}
		}
	}
	st, ok, err := t.d.lookup(t.bs, k, t.bs.head)
	if err != nil {
		t.err = err
		return nil, err
	}
	var it *txItem
	if t.nInline < len(t.inline) {
		it = &t.inline[t.nInline]
		t.nInline++
	} else {
		it = new(txItem)
	}
	*it = txItem{key: k, orig: st, origOK: ok, cur: st, curOK: ok}
	if t.items == nil {
		t.items = t.itemBuf[:0]
	}
	t.items = append(t.items, it)
	if t.index == nil && len(t.items) > 16 {
		t.index = make(map[itemKey]*txItem, 32)
		for _, it := range t.items {
			t.index[it.key] = it
		}
	} else if t.index != nil {
		t.index[k] = it
	}
	return it, nil
}

// body returns an item's body, reading it on first use.
func (t *tx) body(st *itemState) ([]byte, error) {
	if st.body != nil {
		return st.body, nil
	}
	if b := t.d.blobs.body(st.hash); b != nil {
		st.body = b
		return b, nil
	}
	b, err := t.d.r.Body(t.bs.key.org, t.bs.key.project, st.hash)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("the store lists body %s but does not have it: %w", st.hash, err)
		}
		err = fmt.Errorf("read body %s of %s/%s: %w", st.hash, t.bs.key.org, t.bs.key.project, err)
		t.err = err
		return nil, err
	}
	st.body = b
	t.d.blobs.addBody(st.hash, b)
	return b, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
