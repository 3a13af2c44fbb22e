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
	c := conv{a: a, err: v.dupErr(a)}
	m.Org = c.str(v.org, "org", true)
	m.Project = c.str(v.project, "project", true)
	m.Branch = c.str(v.branch, "branch", true)
	m.ClientGroup = c.str(v.clientGroup, "clientGroup", true)
	m.Client = c.str(v.client, "client", true)
	m.ID = c.uint(v.id, "id", 1, true)
	m.Name = c.str(v.name, "name", true)
	m.Args = c.args(v.args, "send the mutator's arguments, or null for none")
	m.TS = c.int(v.ts, "ts", 0, math.MaxInt64, false)
	m.Principal = c.str(v.principal, "principal", false)
	m.ReceivedAt = c.int(v.receivedAt, "receivedAt", 0, math.MaxInt64, false)
	m.Job = parseJob(&c, &v.job)
	m.Origin = parseOrigin(&c, &v.origin)
	return c.err
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
func parseJob(c *conv, v *jobMembers) *Job {
	jc, ok := c.object(v.raw, "job", &v.bound)
	if !ok {
		return nil
	}
	j := &Job{
		Kind:      jc.str(v.kind, "kind", true),
		Principal: jc.str(v.principal, "principal", false),
		At:        jc.int(v.at, "at", 0, math.MaxInt64, true),
	}
	c.err = jc.err
	return j
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
func parseOrigin(c *conv, v *originMembers) *Origin {
	oc, ok := c.object(v.raw, "origin", &v.bound)
	if !ok {
		return nil
	}
	o := &Origin{
		Project: oc.str(v.project, "project", false),
		Branch:  oc.str(v.branch, "branch", true),
		Version: oc.uint(v.version, "version", 0, true),
		Client:  oc.str(v.client, "client", true),
		ID:      oc.uint(v.id, "id", 1, true),
	}
	c.err = oc.err
	return o
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
	bundle                                []byte
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
		case "bundle":
			return v.value(&v.bundle, "bundle", d, at, vd)
		}
		return skip(d, at, vd)
	})
}

func parseVersion(v *versionMembers, ver *Version) error {
	c := conv{a: top, err: v.dupErr(top)}
	ver.Org = c.str(v.org, "org", true)
	ver.Project = c.str(v.project, "project", true)
	ver.Branch = c.str(v.branch, "branch", true)
	ver.Version = c.uint(v.version, "version", 1, true)
	ver.Parent = c.uint(v.parent, "parent", 0, true)
	if bc, ok := c.object(v.base.raw, "base", &v.base.bound); ok {
		ver.Base = &BranchRef{Branch: bc.str(v.base.branch, "branch", true), Version: bc.uint(v.base.version, "version", 1, true)}
		c.err = bc.err
	}
	ver.TS = c.int(v.ts, "ts", 0, math.MaxInt64, true)
	ver.Scalars = v.scalars.parse(&c)
	ver.Items = v.items.parse(&c)
	ver.Mutations = v.mutations.parse(&c)
	ver.LastIDs = v.lastIDs.parse(&c)
	ver.StateHash = c.str(v.stateHash, "stateHash", true)
	if c.err == nil && v.source.raw == nil {
		c.err = top.missing("source")
	}
	sc, ok := c.object(v.source.raw, "source", &v.source.bound)
	ver.DecidedAt = c.int(v.decidedAt, "decidedAt", 0, math.MaxInt64, false)
	ver.Bundle = c.str(v.bundle, "bundle", false)
	if ok && c.err == nil {
		ver.Source = SourceRef{
			Partition: int32(sc.int(v.source.partition, "partition", 0, math.MaxInt32, true)),
			Offset:    sc.int(v.source.offset, "offset", 0, math.MaxInt64, true),
		}
		c.err = sc.err
	}
	return c.err
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

func (s *scalarsMember) parse(c *conv) map[string]json.RawMessage {
	if c.collection(s.raw, "scalars", '{', s.err) {
		return s.vals
	}
	return nil
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

func (l *lastIDsMember) parse(c *conv) map[string]uint64 {
	if c.collection(l.raw, "lastIds", '{', l.err) {
		return l.ids
	}
	return nil
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
	return walkObjects(d, at, depth, "items", &s.err, func(at, i int) (int, bool) {
		v = itemMembers{}
		end, ok := v.walk(d, at, depth+1)
		if ok && s.err == nil {
			var it ItemChange
			if s.err = parseItem(&v, element("items", i), &it); s.err == nil {
				s.vals = append(s.vals, it)
			}
		}
		return end, ok
	})
}

// walkObjects walks an array whose elements must be objects: each is
// walked by object (which returns its end, or false at a fault of the
// JSON text), and the first element that is not an object is err, named
// by the array's name and its index.
func walkObjects(d []byte, at, depth int, name string, err *error, object func(at, i int) (int, bool)) (int, bool) {
	n := 0
	return JSONElements(d, at, depth, func(at int) int {
		i := n
		n++
		if at >= len(d) || d[at] != '{' {
			end, _ := CheckJSONValue(d, at, depth+1)
			if end >= 0 && *err == nil {
				*err = top.errorf(name+"["+strconv.Itoa(i)+"]", "must be an object, got %s", got(d[at:end]))
			}
			return end
		}
		end, ok := object(at, i)
		if !ok {
			return -1
		}
		return end
	})
}

func (s *itemsMember) parse(c *conv) []ItemChange {
	if c.collection(s.raw, "items", '[', s.err) {
		return s.vals
	}
	return nil
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
	c := conv{a: a, err: v.dupErr(a)}
	it.Collection = c.str(v.collection, "collection", true)
	it.ID = c.str(v.id, "id", true)
	it.Op = c.str(v.op, "op", true)
	if v.meta.raw != nil {
		it.Meta = v.meta.copy()
	}
	it.Hash = c.str(v.hash, "hash", false)
	it.Size = c.int(v.size, "size", 0, math.MaxInt64, false)
	it.Chunks = v.chunks.parse(&c, "chunks")
	return c.err
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
	return walkObjects(d, at, depth, "mutations", &s.err, func(at, i int) (int, bool) {
		v = outcomeMembers{}
		end, ok := v.walk(d, at, depth+1)
		if ok && s.err == nil {
			var o Outcome
			if s.err = parseOutcome(&v, element("mutations", i), &o); s.err == nil {
				s.vals = append(s.vals, o)
			}
		}
		return end, ok
	})
}

func (s *outcomesMember) parse(c *conv) []Outcome {
	if !c.collection(s.raw, "mutations", '[', s.err) {
		return nil
	}
	if s.vals == nil {
		return []Outcome{}
	}
	return s.vals
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
	c := conv{a: a, err: v.dupErr(a)}
	o.ClientGroup = c.str(v.clientGroup, "clientGroup", true)
	o.Client = c.str(v.client, "client", true)
	o.ID = c.uint(v.id, "id", 1, true)
	o.Name = c.str(v.name, "name", true)
	o.Args = c.args(v.args, "copy the mutation's args (null for none)")
	o.Status = c.str(v.status, "status", true)
	o.Error = c.str(v.error, "error", false)
	o.TS = c.int(v.ts, "ts", 0, math.MaxInt64, false)
	o.Principal = c.str(v.principal, "principal", false)
	o.ReceivedAt = c.int(v.receivedAt, "receivedAt", 0, math.MaxInt64, false)
	o.Offset = c.int(v.offset, "offset", 0, math.MaxInt64, true)
	o.ArgsRef = parseBlobRef(&c, &v.argsRef, "argsRef")
	o.Code = c.str(v.code, "code", false)
	o.Job = parseJob(&c, &v.job)
	o.Origin = parseOrigin(&c, &v.origin)
	return c.err
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

func parseBlobRef(c *conv, v *blobRefMembers, name string) *BlobRef {
	bc, ok := c.object(v.raw, name, &v.bound)
	if !ok {
		return nil
	}
	ref := &BlobRef{Hash: bc.str(v.hash, "hash", true), Size: bc.int(v.size, "size", 1, math.MaxInt64, true)}
	if bc.err == nil && v.chunks.raw == nil {
		bc.err = bc.a.missing("chunks")
	}
	ref.Chunks = v.chunks.parse(&bc, "chunks")
	c.err = bc.err
	return ref
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
	c := conv{a: a, err: v.dupErr(a)}
	r.Reason = c.str(v.reason, "reason", true)
	r.Message = c.str(v.message, "message", true)
	r.Topic = c.str(v.topic, "topic", true)
	r.Partition = int32(c.int(v.partition, "partition", 0, math.MaxInt32, true))
	r.Offset = c.int(v.offset, "offset", 0, math.MaxInt64, true)
	r.Schema = c.str(v.schema, "schema", false)
	if _, ok := c.object(v.mutation.raw, "mutation", &v.mutation.bound); ok {
		r.Mutation = new(Mutation)
		c.err = parseMutation(&v.mutation.mutationMembers, nested("mutation"), r.Mutation)
	}
	r.ExpectedID = c.uint(v.expectedID, "expectedId", 1, false)
	if v.base64Value != nil {
		if s := c.str(v.base64Value, "value", true); c.err == nil {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				c.err = a.errorf("value", "must be the bytes in standard base64 with padding: %v", err)
			} else if len(b) > 0 {
				r.Value = b
			}
		}
	}
	r.At = c.int(v.at, "at", 0, math.MaxInt64, true)
	return c.err
}
