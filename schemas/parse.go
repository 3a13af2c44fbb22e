package schemas

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
)

// The parse* functions turn a valid JSON object into a record: they check
// the JSON type of each known member and that required members are there,
// and read integers exactly. What the values mean (names, ranges, sizes,
// consistency) is checked afterwards by the validate* functions, which
// the encoders share.

var mutationFields = newFieldSet("org", "project", "branch", "clientGroup", "client", "id", "name", "args", "ts", "principal", "receivedAt", "job", "origin")

func parseMutation(obj []byte, a at, m *Mutation) error {
	var v [13][]byte
	if err := mutationFields.split(obj, a, v[:]); err != nil {
		return err
	}
	var err error
	if m.Org, err = str(v[0], a, "org", true); err != nil {
		return err
	}
	if m.Project, err = str(v[1], a, "project", true); err != nil {
		return err
	}
	if m.Branch, err = str(v[2], a, "branch", true); err != nil {
		return err
	}
	if m.ClientGroup, err = str(v[3], a, "clientGroup", true); err != nil {
		return err
	}
	if m.Client, err = str(v[4], a, "client", true); err != nil {
		return err
	}
	if m.ID, err = uintField(v[5], a, "id", 1, true); err != nil {
		return err
	}
	if m.Name, err = str(v[6], a, "name", true); err != nil {
		return err
	}
	if v[7] == nil {
		return a.errorf("args", "is required but missing: send the mutator's arguments, or null for none")
	}
	m.Args = rawJSON(v[7])
	if m.TS, err = intField(v[8], a, "ts", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if m.Principal, err = str(v[9], a, "principal", false); err != nil {
		return err
	}
	if m.ReceivedAt, err = intField(v[10], a, "receivedAt", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if m.Job, err = parseJob(v[11], a); err != nil {
		return err
	}
	m.Origin, err = parseOrigin(v[12], a)
	return err
}

var jobFields = newFieldSet("kind", "principal", "at")

// parseJob reads the optional job member of a mutation or outcome.
func parseJob(raw []byte, parent at) (*Job, error) {
	if raw == nil {
		return nil, nil
	}
	if err := wantObject(raw, parent, "job"); err != nil {
		return nil, err
	}
	a := parent.child("job")
	var v [3][]byte
	if err := jobFields.split(raw, a, v[:]); err != nil {
		return nil, err
	}
	j := &Job{}
	var err error
	if j.Kind, err = str(v[0], a, "kind", true); err != nil {
		return nil, err
	}
	if j.Principal, err = str(v[1], a, "principal", false); err != nil {
		return nil, err
	}
	if j.At, err = intField(v[2], a, "at", 0, math.MaxInt64, true); err != nil {
		return nil, err
	}
	return j, nil
}

var originFields = newFieldSet("project", "branch", "version", "client", "id")

// parseOrigin reads the optional origin member of a mutation or outcome.
func parseOrigin(raw []byte, parent at) (*Origin, error) {
	if raw == nil {
		return nil, nil
	}
	if err := wantObject(raw, parent, "origin"); err != nil {
		return nil, err
	}
	a := parent.child("origin")
	var v [5][]byte
	if err := originFields.split(raw, a, v[:]); err != nil {
		return nil, err
	}
	o := &Origin{}
	var err error
	if o.Project, err = str(v[0], a, "project", false); err != nil {
		return nil, err
	}
	if o.Branch, err = str(v[1], a, "branch", true); err != nil {
		return nil, err
	}
	if o.Version, err = uintField(v[2], a, "version", 0, true); err != nil {
		return nil, err
	}
	if o.Client, err = str(v[3], a, "client", true); err != nil {
		return nil, err
	}
	if o.ID, err = uintField(v[4], a, "id", 1, true); err != nil {
		return nil, err
	}
	return o, nil
}

var versionFields = newFieldSet("org", "project", "branch", "version", "parent", "base", "ts", "scalars", "items", "mutations", "lastIds", "stateHash", "source", "decidedAt")

func parseVersion(obj []byte, ver *Version) error {
	var v [14][]byte
	if err := versionFields.split(obj, top, v[:]); err != nil {
		return err
	}
	a := top
	var err error
	if ver.Org, err = str(v[0], a, "org", true); err != nil {
		return err
	}
	if ver.Project, err = str(v[1], a, "project", true); err != nil {
		return err
	}
	if ver.Branch, err = str(v[2], a, "branch", true); err != nil {
		return err
	}
	if ver.Version, err = uintField(v[3], a, "version", 1, true); err != nil {
		return err
	}
	if ver.Parent, err = uintField(v[4], a, "parent", 0, true); err != nil {
		return err
	}
	if v[5] != nil {
		if err := wantObject(v[5], a, "base"); err != nil {
			return err
		}
		ver.Base = new(BranchRef)
		if err := parseBranchRef(v[5], ver.Base); err != nil {
			return err
		}
	}
	if ver.TS, err = intField(v[6], a, "ts", 0, math.MaxInt64, true); err != nil {
		return err
	}
	if ver.Scalars, err = parseScalars(v[7]); err != nil {
		return err
	}
	if ver.Items, err = parseItems(v[8]); err != nil {
		return err
	}
	if ver.Mutations, err = parseOutcomes(v[9]); err != nil {
		return err
	}
	if ver.LastIDs, err = parseLastIDs(v[10]); err != nil {
		return err
	}
	if ver.StateHash, err = str(v[11], a, "stateHash", true); err != nil {
		return err
	}
	if v[12] == nil {
		return a.missing("source")
	}
	if err := wantObject(v[12], a, "source"); err != nil {
		return err
	}
	if ver.DecidedAt, err = intField(v[13], a, "decidedAt", 0, math.MaxInt64, false); err != nil {
		return err
	}
	return parseSourceRef(v[12], &ver.Source)
}

var branchRefFields = newFieldSet("branch", "version")

func parseBranchRef(obj []byte, b *BranchRef) error {
	a := nested("base")
	var v [2][]byte
	if err := branchRefFields.split(obj, a, v[:]); err != nil {
		return err
	}
	var err error
	if b.Branch, err = str(v[0], a, "branch", true); err != nil {
		return err
	}
	b.Version, err = uintField(v[1], a, "version", 1, true)
	return err
}

var sourceRefFields = newFieldSet("partition", "offset")

func parseSourceRef(obj []byte, s *SourceRef) error {
	a := nested("source")
	var v [2][]byte
	if err := sourceRefFields.split(obj, a, v[:]); err != nil {
		return err
	}
	p, err := intField(v[0], a, "partition", 0, math.MaxInt32, true)
	if err != nil {
		return err
	}
	s.Partition = int32(p)
	s.Offset, err = intField(v[1], a, "offset", 0, math.MaxInt64, true)
	return err
}

func parseScalars(raw []byte) (map[string]json.RawMessage, error) {
	if raw == nil {
		return nil, top.missing("scalars")
	}
	if err := wantObject(raw, top, "scalars"); err != nil {
		return nil, err
	}
	sc := map[string]json.RawMessage{}
	err := members(raw, func(key, val []byte) error {
		if _, dup := sc[string(key)]; dup {
			return nested("scalars").errorf(short(string(key)), "appears more than once: keep one")
		}
		sc[string(key)] = rawJSON(val)
		return nil
	})
	return sc, err
}

func parseLastIDs(raw []byte) (map[string]uint64, error) {
	if raw == nil {
		return nil, top.missing("lastIds")
	}
	if err := wantObject(raw, top, "lastIds"); err != nil {
		return nil, err
	}
	a := nested("lastIds")
	ids := map[string]uint64{}
	err := members(raw, func(key, val []byte) error {
		if _, dup := ids[string(key)]; dup {
			return a.errorf(short(string(key)), "appears more than once: keep one")
		}
		id, err := uintField(val, a, string(key), 1, true)
		ids[string(key)] = id
		return err
	})
	return ids, err
}

var itemFields = newFieldSet("collection", "id", "op", "meta", "hash", "size", "chunks")

func parseItems(raw []byte) ([]ItemChange, error) {
	if raw == nil {
		return nil, top.missing("items")
	}
	if err := wantArray(raw, top, "items"); err != nil {
		return nil, err
	}
	items := []ItemChange{}
	err := elements(raw, func(i int, val []byte) error {
		if val[0] != '{' {
			return top.errorf("items["+strconv.Itoa(i)+"]", "must be an object, got %s", got(val))
		}
		a := element("items", i)
		var v [7][]byte
		if err := itemFields.split(val, a, v[:]); err != nil {
			return err
		}
		var it ItemChange
		var err error
		if it.Collection, err = str(v[0], a, "collection", true); err != nil {
			return err
		}
		if it.ID, err = str(v[1], a, "id", true); err != nil {
			return err
		}
		if it.Op, err = str(v[2], a, "op", true); err != nil {
			return err
		}
		if v[3] != nil {
			it.Meta = rawJSON(v[3])
		}
		if it.Hash, err = str(v[4], a, "hash", false); err != nil {
			return err
		}
		if it.Size, err = intField(v[5], a, "size", 0, math.MaxInt64, false); err != nil {
			return err
		}
		if v[6] != nil {
			if err := wantArray(v[6], a, "chunks"); err != nil {
				return err
			}
			err := elements(v[6], func(j int, c []byte) error {
				if c[0] != '"' {
					return a.errorf("chunks["+strconv.Itoa(j)+"]", "must be a string, got %s", got(c))
				}
				it.Chunks = append(it.Chunks, unquote(c))
				return nil
			})
			if err != nil {
				return err
			}
		}
		items = append(items, it)
		return nil
	})
	return items, err
}

var outcomeFields = newFieldSet("clientGroup", "client", "id", "name", "args", "status", "error", "ts", "principal", "receivedAt", "offset", "argsRef",
	"code", "job", "origin")

func parseOutcomes(raw []byte) ([]Outcome, error) {
	if raw == nil {
		return nil, top.missing("mutations")
	}
	if err := wantArray(raw, top, "mutations"); err != nil {
		return nil, err
	}
	var outs []Outcome
	err := elements(raw, func(i int, val []byte) error {
		if val[0] != '{' {
			return top.errorf("mutations["+strconv.Itoa(i)+"]", "must be an object, got %s", got(val))
		}
		a := element("mutations", i)
		var v [15][]byte
		if err := outcomeFields.split(val, a, v[:]); err != nil {
			return err
		}
		var o Outcome
		var err error
		if o.ClientGroup, err = str(v[0], a, "clientGroup", true); err != nil {
			return err
		}
		if o.Client, err = str(v[1], a, "client", true); err != nil {
			return err
		}
		if o.ID, err = uintField(v[2], a, "id", 1, true); err != nil {
			return err
		}
		if o.Name, err = str(v[3], a, "name", true); err != nil {
			return err
		}
		if v[4] == nil {
			return a.errorf("args", "is required but missing: copy the mutation's args (null for none)")
		}
		o.Args = rawJSON(v[4])
		if o.Status, err = str(v[5], a, "status", true); err != nil {
			return err
		}
		if o.Error, err = str(v[6], a, "error", false); err != nil {
			return err
		}
		if o.TS, err = intField(v[7], a, "ts", 0, math.MaxInt64, false); err != nil {
			return err
		}
		if o.Principal, err = str(v[8], a, "principal", false); err != nil {
			return err
		}
		if o.ReceivedAt, err = intField(v[9], a, "receivedAt", 0, math.MaxInt64, false); err != nil {
			return err
		}
		if o.Offset, err = intField(v[10], a, "offset", 0, math.MaxInt64, true); err != nil {
			return err
		}
		if v[11] != nil {
			if o.ArgsRef, err = parseBlobRef(v[11], a, "argsRef"); err != nil {
				return err
			}
		}
		if o.Code, err = str(v[12], a, "code", false); err != nil {
			return err
		}
		if o.Job, err = parseJob(v[13], a); err != nil {
			return err
		}
		if o.Origin, err = parseOrigin(v[14], a); err != nil {
			return err
		}
		outs = append(outs, o)
		return nil
	})
	if outs == nil && err == nil {
		outs = []Outcome{}
	}
	return outs, err
}

var blobRefFields = newFieldSet("hash", "size", "chunks")

func parseBlobRef(raw []byte, parent at, name string) (*BlobRef, error) {
	if raw[0] != '{' {
		return nil, parent.errorf(name, "must be an object, got %s", got(raw))
	}
	a := parent.child(name)
	var v [3][]byte
	if err := blobRefFields.split(raw, a, v[:]); err != nil {
		return nil, err
	}
	ref := &BlobRef{}
	var err error
	if ref.Hash, err = str(v[0], a, "hash", true); err != nil {
		return nil, err
	}
	if ref.Size, err = intField(v[1], a, "size", 1, math.MaxInt64, true); err != nil {
		return nil, err
	}
	if v[2] == nil {
		return nil, a.missing("chunks")
	}
	if err := wantArray(v[2], a, "chunks"); err != nil {
		return nil, err
	}
	err = elements(v[2], func(j int, c []byte) error {
		if c[0] != '"' {
			return a.errorf("chunks["+strconv.Itoa(j)+"]", "must be a string, got %s", got(c))
		}
		ref.Chunks = append(ref.Chunks, unquote(c))
		return nil
	})
	return ref, err
}

var rejectedFields = newFieldSet("reason", "message", "topic", "partition", "offset", "schema", "mutation", "expectedId", "value", "at")

func parseRejected(obj []byte, r *Rejected) error {
	a := top
	var v [10][]byte
	if err := rejectedFields.split(obj, a, v[:]); err != nil {
		return err
	}
	var err error
	if r.Reason, err = str(v[0], a, "reason", true); err != nil {
		return err
	}
	if r.Message, err = str(v[1], a, "message", true); err != nil {
		return err
	}
	if r.Topic, err = str(v[2], a, "topic", true); err != nil {
		return err
	}
	p, err := intField(v[3], a, "partition", 0, math.MaxInt32, true)
	if err != nil {
		return err
	}
	r.Partition = int32(p)
	if r.Offset, err = intField(v[4], a, "offset", 0, math.MaxInt64, true); err != nil {
		return err
	}
	if r.Schema, err = str(v[5], a, "schema", false); err != nil {
		return err
	}
	if v[6] != nil {
		if err := wantObject(v[6], a, "mutation"); err != nil {
			return err
		}
		r.Mutation = new(Mutation)
		if err := parseMutation(v[6], nested("mutation"), r.Mutation); err != nil {
			return err
		}
	}
	if r.ExpectedID, err = uintField(v[7], a, "expectedId", 1, false); err != nil {
		return err
	}
	if v[8] != nil {
		s, err := str(v[8], a, "value", true)
		if err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return a.errorf("value", "must be the bytes in standard base64 with padding: %v", err)
		}
		if len(b) > 0 {
			r.Value = b
		}
	}
	r.At, err = intField(v[9], a, "at", 0, math.MaxInt64, true)
	return err
}
