package model

import (
	"encoding/json"
	"fmt"

	"github.com/canon-sync/canon/schemas"
)

// The built-in mutators. Their arguments are also documented in
// docs/mutators.md. A bad argument is an error outcome whose message names
// the field ("args.<field>"); so is a missing item or a limit.

// projectSet sets the project's scalars.
//
// args: an object of scalar name -> JSON value, at least one; null deletes
// the scalar. Names are 1-64 letters, digits and '_', starting with a
// letter. The canonical JSON of all scalars after the mutation must fit
// Limits.MaxScalarsBytes (1536 bytes by default).
//
//	{"name": "Roadmap", "description": null}
func projectSet(x Tx, raw json.RawMessage) error {
	t := x.(*tx)
	if firstByte(raw) != '{' {
		return &schemas.FieldError{Field: "args", Reason: `must be a JSON object of scalar name -> value (null deletes), such as {"name":"Roadmap"}`}
	}
	canon, err := Canonical(raw)
	if err != nil {
		return &schemas.FieldError{Field: "args", Reason: err.Error()}
	}
	// Canonical order: the first bad name reported is the same on every
	// run.
	n := 0
	var bad error
	_, ok := schemas.JSONMemberSpans(canon, 0, 0, func(ks, ke, vs int) int {
		ve, err := valueEnd(canon, vs, 1)
		if err != nil {
			return -1
		}
		name := decodeString(canon[ks:ke])
		if bad = schemas.ValidateScalarName("args", name); bad != nil {
			return -1
		}
		t.setScalar(name, canon[vs:ve])
		n++
		return ve
	})
	switch {
	case bad != nil:
		return bad
	case !ok:
		return &schemas.FieldError{Field: "args", Reason: errNotCanonical.Error()}
	}
	if n == 0 {
		return &schemas.FieldError{Field: "args", Reason: "sets no scalar: give at least one name -> value (null deletes)"}
	}
	return nil
}

// itemPut creates or replaces an item.
//
// args: {"collection": string, "id": string, "meta": object (optional,
// default {}), "data": any JSON (required; null is a value)}. The
// canonical meta must fit Limits.MaxMetaBytes (4 KiB by default), the
// canonical data Limits.MaxDataBytes (1 MiB by default).
func itemPut(x Tx, raw json.RawMessage) error {
	t := x.(*tx)
	a, err := parseArgs(raw, "collection", "id", "meta", "data")
	if err != nil {
		return err
	}
	collection, id, err := a.target()
	if err != nil {
		return err
	}
	meta := json.RawMessage(emptyObject)
	if m, ok := a.get("meta"); ok {
		if m[0] != '{' {
			return argErr("meta", "must be a JSON object, not %s", jsonKind(m))
		}
		meta = m
	}
	data, ok := a.get("data")
	if !ok {
		return argErr("data", "is required (any JSON value)")
	}
	it, err := t.item(collection, id)
	if err != nil {
		return err
	}
	return t.put(it, meta, data)
}

// itemPatch applies JSON merge patches (RFC 7396) to an existing item.
//
// args: {"collection": string, "id": string, "meta": merge patch
// (optional), "data": merge patch (optional)}, at least one of meta and
// data. A patch object merges member by member (null deletes a member);
// any other patch value replaces the whole. Two clients patching
// different members of one item both keep their change. The patched meta
// must still be an object. A missing item is an error outcome.
func itemPatch(x Tx, raw json.RawMessage) error {
	t := x.(*tx)
	a, err := parseArgs(raw, "collection", "id", "meta", "data")
	if err != nil {
		return err
	}
	collection, id, err := a.target()
	if err != nil {
		return err
	}
	metaPatch, hasMeta := a.get("meta")
	dataPatch, hasData := a.get("data")
	if !hasMeta && !hasData {
		return &schemas.FieldError{Field: "args", Reason: `patches nothing: give "meta", "data" or both (JSON merge patches)`}
	}
	it, err := t.item(collection, id)
	if err != nil {
		return err
	}
	if !it.curOK {
		return &notFoundError{it.key}
	}
	meta := it.cur.meta
	if hasMeta {
		if meta, err = mergePatch(it.cur.meta, metaPatch); err != nil {
			return &CodedError{Code: CodeInvalidEdit, Err: fmt.Errorf("item %s/%s: merge meta: %w", collection, id, err)}
		}
		if firstByte(meta) != '{' {
			return argErr("meta", "the patched meta would be %s: meta must stay a JSON object", jsonKind(meta))
		}
	}
	if !hasData {
		return t.putMeta(it, meta)
	}
	body, err := t.body(&it.cur)
	if err != nil {
		return err
	}
	data, err := mergePatch(body, dataPatch)
	if err != nil {
		return &CodedError{Code: CodeInvalidEdit, Err: fmt.Errorf("item %s/%s: merge data: %w", collection, id, err)}
	}
	return t.put(it, meta, data)
}

// itemDelete deletes an existing item.
//
// args: {"collection": string, "id": string}. A missing item is an error
// outcome.
func itemDelete(x Tx, raw json.RawMessage) error {
	a, err := parseArgs(raw, "collection", "id")
	if err != nil {
		return err
	}
	collection, id, err := a.target()
	if err != nil {
		return err
	}
	return x.Delete(collection, id)
}

// itemSplice edits a string inside an item's data, for text editing.
//
// args: {"collection": string, "id": string, "path": RFC 6901 JSON pointer
// into data (optional, default "": data itself is the string), "index":
// integer >= 0 (required), "delete": integer >= 0 (optional, default 0),
// "insert": string (optional, default "")}. It deletes `delete` characters
// at `index` and inserts `insert` there. index and delete count UTF-16
// code units, as JavaScript strings do (an emoji outside the BMP counts
// 2, and a splice may not cut one in half). The target must exist and be
// a string; index and index+delete must be within it.
//
// A splice applies at the index it names, against the canonical state:
// there is no operational transform. Two clients inserting at the same
// index both keep their text, the one decided later in front of the
// other; a client that wants its edits rebased over others' transforms
// its indices before sending (or the application registers a mutator with
// its own merge rule).
func itemSplice(x Tx, raw json.RawMessage) error {
	t := x.(*tx)
	a, err := parseArgs(raw, "collection", "id", "path", "index", "delete", "insert")
	if err != nil {
		return err
	}
	collection, id, err := a.target()
	if err != nil {
		return err
	}
	path, _, err := a.str("path")
	if err != nil {
		return err
	}
	if _, err := parsePointer(path); err != nil {
		return argErr("path", "%v", err)
	}
	index, ok, err := a.uint("index")
	if err != nil {
		return err
	}
	if !ok {
		return argErr("index", "is required (an integer >= 0, in UTF-16 code units)")
	}
	del, _, err := a.uint("delete")
	if err != nil {
		return err
	}
	insert, _, err := a.str("insert")
	if err != nil {
		return err
	}
	it, err := t.item(collection, id)
	if err != nil {
		return err
	}
	if !it.curOK {
		return &notFoundError{it.key}
	}
	body, err := t.body(&it.cur)
	if err != nil {
		return err
	}
	data, err := spliceJSON(body, path, index, del, insert)
	if err != nil {
		return &CodedError{Code: CodeInvalidEdit, Err: fmt.Errorf("item %s/%s: %w", collection, id, err)}
	}
	return t.put(it, it.cur.meta, data)
}

// branchCreateArgs are the arguments of branch.create, which the Decider
// runs itself: it reads another branch.
//
// args: {"from": branch (required), "version": integer (optional; 0 or
// absent: from's head)}. The mutation's branch is the new branch; it must
// not exist, from must exist and have the version. The new branch's
// version 1 has from@version's state: the same scalars, the same items
// (bodies shared by hash, never copied), the same state hash.
type branchCreateArgs struct {
	from    string
	version uint64
}

func parseBranchCreate(raw json.RawMessage) (branchCreateArgs, error) {
	a, err := parseArgs(raw, "from", "version")
	if err != nil {
		return branchCreateArgs{}, err
	}
	from, ok, err := a.str("from")
	if err != nil {
		return branchCreateArgs{}, err
	}
	if !ok {
		return branchCreateArgs{}, argErr("from", "is required (the branch to start from)")
	}
	if err := schemas.ValidateBranch("args.from", from); err != nil {
		return branchCreateArgs{}, err
	}
	v, _, err := a.uint("version")
	if err != nil {
		return branchCreateArgs{}, err
	}
	return branchCreateArgs{from: from, version: uint64(v)}, nil
}
