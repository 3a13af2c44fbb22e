package schemas

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
)

// A record is read in one pass of the toolkit's walkers, which check its
// JSON as they go. Each kind of object has a members struct whose walk
// binds the raw value of each known member by its name; arrays and maps
// are converted element by element as the walk ends each one. The parse*
// functions then convert the bound values in declaration order (a member
// that appeared twice first), so that a record with several faults
// reports the same one whatever the order of its members: the JSON type
// of each member, that required members are there, integers read
// exactly. What the values mean (names, ranges, sizes, consistency) is
// checked afterwards by the validate* functions, which the encoders
// share.

type mutationMembers struct {
	bound
	org, project, branch, clientGroup, client, id, name []byte
	args                                                jsonValue
	ts, principal, receivedAt                           []byte
	job                                                 jobMembers
	origin                                              originMembers
}

func (m *mutationMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "org":
			return m.value(&m.org, "org", d, at, vd)
		case "project":
			return m.value(&m.project, "project", d, at, vd)
		case "branch":
			return m.value(&m.branch, "branch", d, at, vd)
		case "clientGroup":
			return m.value(&m.clientGroup, "clientGroup", d, at, vd)
		case "client":
			return m.value(&m.client, "client", d, at, vd)
		case "id":
			return m.value(&m.id, "id", d, at, vd)
		case "name":
			return m.value(&m.name, "name", d, at, vd)
		case "args":
			return m.json(&m.args, "args", d, at, vd)
		case "ts":
			return m.value(&m.ts, "ts", d, at, vd)
		case "principal":
			return m.value(&m.principal, "principal", d, at, vd)
		case "receivedAt":
			return m.value(&m.receivedAt, "receivedAt", d, at, vd)
		case "job":
			return m.nest(&m.job.raw, "job", d, at, vd, '{', m.job.walk)
		case "origin":
			return m.nest(&m.origin.raw, "origin", d, at, vd, '{', m.origin.walk)
		}
		return skip(d, at, vd)
	})
}

func parseMutation(v *mutationMembers, a at, m *Mutation) error {
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if m.Org, err = str(v.org, a, "org", true); err != nil {
		return err
	}
	if m.Project, err = str(v.project, a, "project", true); err != nil {
		return err
	}
	if m.Branch, err = str(v.branch, a, "branch", true); err != nil {
		return err
	}
	if m.ClientGroup, err = str(v.clientGroup, a, "clientGroup", true); err != nil {
		return err
	}
	if m.Client, err = str(v.client, a, "client", true); err != nil {
		return err
	}
	if m.ID, err = uintField(v.id, a, "id", 1, true); err != nil {
		return err
	}
	if m.Name, err = str(v.name, a, "name", true); err != nil {
		return err
	}
	if v.args.raw == nil {
		return a.errorf("args", "is required but missing: send the mutator's arguments, or null for none")
	}
	m.Args = v.args.copy()
	if m.TS, err = intField(v.ts, a, "ts", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if m.Principal, err = str(v.principal, a, "principal", false); err != nil {
		return err
	}
	if m.ReceivedAt, err = intField(v.receivedAt, a, "receivedAt", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if m.Job, err = parseJob(&v.job, a); err != nil {
		return err
	}
	m.Origin, err = parseOrigin(&v.origin, a)
	return err
}

type jobMembers struct {
	raw []byte
	bound
	kind, principal, at []byte
}

func (j *jobMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "kind":
			return j.value(&j.kind, "kind", d, at, vd)
		case "principal":
			return j.value(&j.principal, "principal", d, at, vd)
		case "at":
			return j.value(&j.at, "at", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

// parseJob reads the optional job member of a mutation or outcome.
func parseJob(v *jobMembers, parent at) (*Job, error) {
	if v.raw == nil {
		return nil, nil
	}
	if err := wantObject(v.raw, parent, "job"); err != nil {
		return nil, err
	}
	a := parent.child("job")
	if err := v.dupErr(a); err != nil {
		return nil, err
	}
	j := &Job{}
	var err error
	if j.Kind, err = str(v.kind, a, "kind", true); err != nil {
		return nil, err
	}
	if j.Principal, err = str(v.principal, a, "principal", false); err != nil {
		return nil, err
	}
	if j.At, err = intField(v.at, a, "at", 0, math.MaxInt64, true); err != nil {
		return nil, err
	}
	return j, nil
}

type originMembers struct {
	raw []byte
	bound
	project, branch, version, client, id []byte
}

func (o *originMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "project":
			return o.value(&o.project, "project", d, at, vd)
		case "branch":
			return o.value(&o.branch, "branch", d, at, vd)
		case "version":
			return o.value(&o.version, "version", d, at, vd)
		case "client":
			return o.value(&o.client, "client", d, at, vd)
		case "id":
			return o.value(&o.id, "id", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

// parseOrigin reads the optional origin member of a mutation or outcome.
func parseOrigin(v *originMembers, parent at) (*Origin, error) {
	if v.raw == nil {
		return nil, nil
	}
	if err := wantObject(v.raw, parent, "origin"); err != nil {
		return nil, err
	}
	a := parent.child("origin")
	if err := v.dupErr(a); err != nil {
		return nil, err
	}
	o := &Origin{}
	var err error
	if o.Project, err = str(v.project, a, "project", false); err != nil {
		return nil, err
	}
	if o.Branch, err = str(v.branch, a, "branch", true); err != nil {
		return nil, err
	}
	if o.Version, err = uintField(v.version, a, "version", 0, true); err != nil {
		return nil, err
	}
	if o.Client, err = str(v.client, a, "client", true); err != nil {
		return nil, err
	}
	if o.ID, err = uintField(v.id, a, "id", 1, true); err != nil {
		return nil, err
	}
	return o, nil
}

type versionMembers struct {
	bound
	org, project, branch, version, parent []byte
	base                                  branchRefMembers
	ts                                    []byte
	scalars                               scalarsMember
	items                                 itemsMember
	mutations                             outcomesMember
	lastIDs                               lastIDsMember
	stateHash                             []byte
	source                                sourceRefMembers
	decidedAt                             []byte
}

func (v *versionMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "org":
			return v.value(&v.org, "org", d, at, vd)
		case "project":
			return v.value(&v.project, "project", d, at, vd)
		case "branch":
			return v.value(&v.branch, "branch", d, at, vd)
		case "version":
			return v.value(&v.version, "version", d, at, vd)
		case "parent":
			return v.value(&v.parent, "parent", d, at, vd)
		case "base":
			return v.nest(&v.base.raw, "base", d, at, vd, '{', v.base.walk)
		case "ts":
			return v.value(&v.ts, "ts", d, at, vd)
		case "scalars":
			return v.nest(&v.scalars.raw, "scalars", d, at, vd, '{', v.scalars.walk)
		case "items":
			return v.nest(&v.items.raw, "items", d, at, vd, '[', v.items.walk)
		case "mutations":
			return v.nest(&v.mutations.raw, "mutations", d, at, vd, '[', v.mutations.walk)
		case "lastIds":
			return v.nest(&v.lastIDs.raw, "lastIds", d, at, vd, '{', v.lastIDs.walk)
		case "stateHash":
			return v.value(&v.stateHash, "stateHash", d, at, vd)
		case "source":
			return v.nest(&v.source.raw, "source", d, at, vd, '{', v.source.walk)
		case "decidedAt":
			return v.value(&v.decidedAt, "decidedAt", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

func parseVersion(v *versionMembers, ver *Version) error {
	a := top
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if ver.Org, err = str(v.org, a, "org", true); err != nil {
		return err
	}
	if ver.Project, err = str(v.project, a, "project", true); err != nil {
		return err
	}
	if ver.Branch, err = str(v.branch, a, "branch", true); err != nil {
		return err
	}
	if ver.Version, err = uintField(v.version, a, "version", 1, true); err != nil {
		return err
	}
	if ver.Parent, err = uintField(v.parent, a, "parent", 0, true); err != nil {
		return err
	}
	if v.base.raw != nil {
		if err := wantObject(v.base.raw, a, "base"); err != nil {
			return err
		}
		ver.Base = new(BranchRef)
		if err := parseBranchRef(&v.base, ver.Base); err != nil {
			return err
		}
	}
	if ver.TS, err = intField(v.ts, a, "ts", 0, math.MaxInt64, true); err != nil {
		return err
	}
	if ver.Scalars, err = v.scalars.parse(); err != nil {
		return err
	}
	if ver.Items, err = v.items.parse(); err != nil {
		return err
	}
	if ver.Mutations, err = v.mutations.parse(); err != nil {
		return err
	}
	if ver.LastIDs, err = v.lastIDs.parse(); err != nil {
		return err
	}
	if ver.StateHash, err = str(v.stateHash, a, "stateHash", true); err != nil {
		return err
	}
	if v.source.raw == nil {
		return a.missing("source")
	}
	if err := wantObject(v.source.raw, a, "source"); err != nil {
		return err
	}
	if ver.DecidedAt, err = intField(v.decidedAt, a, "decidedAt", 0, math.MaxInt64, false); err != nil {
		return err
	}
	return parseSourceRef(&v.source, &ver.Source)
}

type branchRefMembers struct {
	raw []byte
	bound
	branch, version []byte
}

func (b *branchRefMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "branch":
			return b.value(&b.branch, "branch", d, at, vd)
		case "version":
			return b.value(&b.version, "version", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

func parseBranchRef(v *branchRefMembers, b *BranchRef) error {
	a := nested("base")
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if b.Branch, err = str(v.branch, a, "branch", true); err != nil {
		return err
	}
	b.Version, err = uintField(v.version, a, "version", 1, true)
	return err
}

type sourceRefMembers struct {
	raw []byte
	bound
	partition, offset []byte
}

func (s *sourceRefMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "partition":
			return s.value(&s.partition, "partition", d, at, vd)
		case "offset":
			return s.value(&s.offset, "offset", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

func parseSourceRef(v *sourceRefMembers, s *SourceRef) error {
	a := nested("source")
	if err := v.dupErr(a); err != nil {
		return err
	}
	p, err := intField(v.partition, a, "partition", 0, math.MaxInt32, true)
	if err != nil {
		return err
	}
	s.Partition = int32(p)
	s.Offset, err = intField(v.offset, a, "offset", 0, math.MaxInt64, true)
	return err
}

// scalarsMember reads the scalars as the walk goes; err is the first
// fault, in the order of the members.
type scalarsMember struct {
	raw  []byte
	vals map[string]json.RawMessage
	err  error
}

func (s *scalarsMember) walk(d []byte, at, depth int) (int, bool) {
	s.vals, s.err = map[string]json.RawMessage{}, nil
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		end, compact := CheckJSONValue(d, at, depth+1)
		if end < 0 || s.err != nil {
			return end
		}
		if _, dup := s.vals[string(key)]; dup {
			s.err = nested("scalars").errorf(short(string(key)), "appears more than once: keep one")
			return end
		}
		s.vals[string(key)] = jsonValue{d[at:end], compact}.copy()
		return end
	})
}

func (s *scalarsMember) parse() (map[string]json.RawMessage, error) {
	if s.raw == nil {
		return nil, top.missing("scalars")
	}
	if err := wantObject(s.raw, top, "scalars"); err != nil {
		return nil, err
	}
	return s.vals, s.err
}

// lastIDsMember reads the last ids as scalarsMember reads the scalars.
type lastIDsMember struct {
	raw []byte
	ids map[string]uint64
	err error
}

func (l *lastIDsMember) walk(d []byte, at, depth int) (int, bool) {
	l.ids, l.err = map[string]uint64{}, nil
	a := nested("lastIds")
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		end, _ := CheckJSONValue(d, at, depth+1)
		if end < 0 || l.err != nil {
			return end
		}
		if _, dup := l.ids[string(key)]; dup {
			l.err = a.errorf(short(string(key)), "appears more than once: keep one")
			return end
		}
		id, err := uintField(d[at:end], a, string(key), 1, true)
		l.ids[string(key)] = id
		l.err = err
		return end
	})
}

func (l *lastIDsMember) parse() (map[string]uint64, error) {
	if l.raw == nil {
		return nil, top.missing("lastIds")
	}
	if err := wantObject(l.raw, top, "lastIds"); err != nil {
		return nil, err
	}
	return l.ids, l.err
}

// itemsMember reads the item changes as the walk goes: each is parsed
// when the walk ends it, up to the first fault.
type itemsMember struct {
	raw  []byte
	vals []ItemChange
	err  error
}

func (s *itemsMember) walk(d []byte, at, depth int) (int, bool) {
	s.vals, s.err = []ItemChange{}, nil
	var v itemMembers
	n := 0
	return JSONElements(d, at, depth, func(at int) int {
		i := n
		n++
		if at >= len(d) || d[at] != '{' {
			end, _ := CheckJSONValue(d, at, depth+1)
			if end >= 0 && s.err == nil {
				s.err = top.errorf("items["+strconv.Itoa(i)+"]", "must be an object, got %s", got(d[at:end]))
			}
			return end
		}
		v = itemMembers{}
		end, ok := v.walk(d, at, depth+1)
		if !ok {
			return -1
		}
		if s.err == nil {
			var it ItemChange
			if s.err = parseItem(&v, element("items", i), &it); s.err == nil {
				s.vals = append(s.vals, it)
			}
		}
		return end
	})
}

func (s *itemsMember) parse() ([]ItemChange, error) {
	if s.raw == nil {
		return nil, top.missing("items")
	}
	if err := wantArray(s.raw, top, "items"); err != nil {
		return nil, err
	}
	return s.vals, s.err
}

type itemMembers struct {
	bound
	collection, id, op []byte
	meta               jsonValue
	hash, size         []byte
	chunks             stringsMember
}

func (it *itemMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "collection":
			return it.value(&it.collection, "collection", d, at, vd)
		case "id":
			return it.value(&it.id, "id", d, at, vd)
		case "op":
			return it.value(&it.op, "op", d, at, vd)
		case "meta":
			return it.json(&it.meta, "meta", d, at, vd)
		case "hash":
			return it.value(&it.hash, "hash", d, at, vd)
		case "size":
			return it.value(&it.size, "size", d, at, vd)
		case "chunks":
			return it.nest(&it.chunks.raw, "chunks", d, at, vd, '[', it.chunks.walk)
		}
		return skip(d, at, vd)
	})
}

func parseItem(v *itemMembers, a at, it *ItemChange) error {
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if it.Collection, err = str(v.collection, a, "collection", true); err != nil {
		return err
	}
	if it.ID, err = str(v.id, a, "id", true); err != nil {
		return err
	}
	if it.Op, err = str(v.op, a, "op", true); err != nil {
		return err
	}
	if v.meta.raw != nil {
		it.Meta = v.meta.copy()
	}
	if it.Hash, err = str(v.hash, a, "hash", false); err != nil {
		return err
	}
	if it.Size, err = intField(v.size, a, "size", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if v.chunks.raw != nil {
		if it.Chunks, err = v.chunks.parse(a, "chunks"); err != nil {
			return err
		}
	}
	return nil
}

// outcomesMember reads the mutations of a version as itemsMember reads
// its items.
type outcomesMember struct {
	raw  []byte
	vals []Outcome
	err  error
}

func (s *outcomesMember) walk(d []byte, at, depth int) (int, bool) {
	s.vals, s.err = nil, nil
	var v outcomeMembers
	n := 0
	return JSONElements(d, at, depth, func(at int) int {
		i := n
		n++
		if at >= len(d) || d[at] != '{' {
			end, _ := CheckJSONValue(d, at, depth+1)
			if end >= 0 && s.err == nil {
				s.err = top.errorf("mutations["+strconv.Itoa(i)+"]", "must be an object, got %s", got(d[at:end]))
			}
			return end
		}
		v = outcomeMembers{}
		end, ok := v.walk(d, at, depth+1)
		if !ok {
			return -1
		}
		if s.err == nil {
			var o Outcome
			if s.err = parseOutcome(&v, element("mutations", i), &o); s.err == nil {
				s.vals = append(s.vals, o)
			}
		}
		return end
	})
}

func (s *outcomesMember) parse() ([]Outcome, error) {
	if s.raw == nil {
		return nil, top.missing("mutations")
	}
	if err := wantArray(s.raw, top, "mutations"); err != nil {
		return nil, err
	}
	if s.vals == nil && s.err == nil {
		return []Outcome{}, nil
	}
	return s.vals, s.err
}

type outcomeMembers struct {
	bound
	clientGroup, client, id, name []byte
	args                          jsonValue
	status, error, ts, principal  []byte
	receivedAt, offset            []byte
	argsRef                       blobRefMembers
	code                          []byte
	job                           jobMembers
	origin                        originMembers
}

func (o *outcomeMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "clientGroup":
			return o.value(&o.clientGroup, "clientGroup", d, at, vd)
		case "client":
			return o.value(&o.client, "client", d, at, vd)
		case "id":
			return o.value(&o.id, "id", d, at, vd)
		case "name":
			return o.value(&o.name, "name", d, at, vd)
		case "args":
			return o.json(&o.args, "args", d, at, vd)
		case "status":
			return o.value(&o.status, "status", d, at, vd)
		case "error":
			return o.value(&o.error, "error", d, at, vd)
		case "ts":
			return o.value(&o.ts, "ts", d, at, vd)
		case "principal":
			return o.value(&o.principal, "principal", d, at, vd)
		case "receivedAt":
			return o.value(&o.receivedAt, "receivedAt", d, at, vd)
		case "offset":
			return o.value(&o.offset, "offset", d, at, vd)
		case "argsRef":
			return o.nest(&o.argsRef.raw, "argsRef", d, at, vd, '{', o.argsRef.walk)
		case "code":
			return o.value(&o.code, "code", d, at, vd)
		case "job":
			return o.nest(&o.job.raw, "job", d, at, vd, '{', o.job.walk)
		case "origin":
			return o.nest(&o.origin.raw, "origin", d, at, vd, '{', o.origin.walk)
		}
		return skip(d, at, vd)
	})
}

func parseOutcome(v *outcomeMembers, a at, o *Outcome) error {
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if o.ClientGroup, err = str(v.clientGroup, a, "clientGroup", true); err != nil {
		return err
	}
	if o.Client, err = str(v.client, a, "client", true); err != nil {
		return err
	}
	if o.ID, err = uintField(v.id, a, "id", 1, true); err != nil {
		return err
	}
	if o.Name, err = str(v.name, a, "name", true); err != nil {
		return err
	}
	if v.args.raw == nil {
		return a.errorf("args", "is required but missing: copy the mutation's args (null for none)")
	}
	o.Args = v.args.copy()
	if o.Status, err = str(v.status, a, "status", true); err != nil {
		return err
	}
	if o.Error, err = str(v.error, a, "error", false); err != nil {
		return err
	}
	if o.TS, err = intField(v.ts, a, "ts", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if o.Principal, err = str(v.principal, a, "principal", false); err != nil {
		return err
	}
	if o.ReceivedAt, err = intField(v.receivedAt, a, "receivedAt", 0, math.MaxInt64, false); err != nil {
		return err
	}
	if o.Offset, err = intField(v.offset, a, "offset", 0, math.MaxInt64, true); err != nil {
		return err
	}
	if v.argsRef.raw != nil {
		if o.ArgsRef, err = parseBlobRef(&v.argsRef, a, "argsRef"); err != nil {
			return err
		}
	}
	if o.Code, err = str(v.code, a, "code", false); err != nil {
		return err
	}
	if o.Job, err = parseJob(&v.job, a); err != nil {
		return err
	}
	o.Origin, err = parseOrigin(&v.origin, a)
	return err
}

type blobRefMembers struct {
	raw []byte
	bound
	hash, size []byte
	chunks     stringsMember
}

func (b *blobRefMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "hash":
			return b.value(&b.hash, "hash", d, at, vd)
		case "size":
			return b.value(&b.size, "size", d, at, vd)
		case "chunks":
			return b.nest(&b.chunks.raw, "chunks", d, at, vd, '[', b.chunks.walk)
		}
		return skip(d, at, vd)
	})
}

func parseBlobRef(v *blobRefMembers, parent at, name string) (*BlobRef, error) {
	if v.raw[0] != '{' {
		return nil, parent.errorf(name, "must be an object, got %s", got(v.raw))
	}
	a := parent.child(name)
	if err := v.dupErr(a); err != nil {
		return nil, err
	}
	ref := &BlobRef{}
	var err error
	if ref.Hash, err = str(v.hash, a, "hash", true); err != nil {
		return nil, err
	}
	if ref.Size, err = intField(v.size, a, "size", 1, math.MaxInt64, true); err != nil {
		return nil, err
	}
	if v.chunks.raw == nil {
		return nil, a.missing("chunks")
	}
	ref.Chunks, err = v.chunks.parse(a, "chunks")
	return ref, err
}

type rejectedMembers struct {
	bound
	reason, message, topic, partition, offset, schema []byte
	mutation                                          struct {
		raw []byte
		mutationMembers
	}
	expectedID, base64Value, at []byte
}

func (r *rejectedMembers) walk(d []byte, at, depth int) (int, bool) {
	return JSONMembersUnescaped(d, at, depth, func(key []byte, at int) int {
		vd := depth + 1
		switch string(key) {
		case "reason":
			return r.value(&r.reason, "reason", d, at, vd)
		case "message":
			return r.value(&r.message, "message", d, at, vd)
		case "topic":
			return r.value(&r.topic, "topic", d, at, vd)
		case "partition":
			return r.value(&r.partition, "partition", d, at, vd)
		case "offset":
			return r.value(&r.offset, "offset", d, at, vd)
		case "schema":
			return r.value(&r.schema, "schema", d, at, vd)
		case "mutation":
			return r.nest(&r.mutation.raw, "mutation", d, at, vd, '{', r.mutation.walk)
		case "expectedId":
			return r.value(&r.expectedID, "expectedId", d, at, vd)
		case "value":
			return r.value(&r.base64Value, "value", d, at, vd)
		case "at":
			return r.value(&r.at, "at", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

func parseRejected(v *rejectedMembers, r *Rejected) error {
	a := top
	if err := v.dupErr(a); err != nil {
		return err
	}
	var err error
	if r.Reason, err = str(v.reason, a, "reason", true); err != nil {
		return err
	}
	if r.Message, err = str(v.message, a, "message", true); err != nil {
		return err
	}
	if r.Topic, err = str(v.topic, a, "topic", true); err != nil {
		return err
	}
	p, err := intField(v.partition, a, "partition", 0, math.MaxInt32, true)
	if err != nil {
		return err
	}
	r.Partition = int32(p)
	if r.Offset, err = intField(v.offset, a, "offset", 0, math.MaxInt64, true); err != nil {
		return err
	}
	if r.Schema, err = str(v.schema, a, "schema", false); err != nil {
		return err
	}
	if v.mutation.raw != nil {
		if err := wantObject(v.mutation.raw, a, "mutation"); err != nil {
			return err
		}
		r.Mutation = new(Mutation)
		if err := parseMutation(&v.mutation.mutationMembers, nested("mutation"), r.Mutation); err != nil {
			return err
		}
	}
	if r.ExpectedID, err = uintField(v.expectedID, a, "expectedId", 1, false); err != nil {
		return err
	}
	if v.base64Value != nil {
		s, err := str(v.base64Value, a, "value", true)
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
	r.At, err = intField(v.at, a, "at", 0, math.MaxInt64, true)
	return err
}
