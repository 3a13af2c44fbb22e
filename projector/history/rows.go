package history

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// The rows of one batch, column by column, in the column order of the
// tables' INSERT statements (see tables). Columnar slices are what the
// native protocol sends, so appending them costs no reflection per value.

type versionRows struct {
	org, project, branch    []string
	version, parent         []uint64
	baseBranch              []string
	baseVersion             []uint64
	ts                      []time.Time
	tsMS                    []uint64
	scalars, stateHash      []string
	itemsChanged, mutations []uint32
	applied, errored        []uint32
	newChunks               []uint32
	newBytes                []uint64
	sourcePartition         []int32
	sourceOffset            []int64
	kafkaPartition          []int32
	kafkaOffset             []int64
	decidedAt, committedAt  []time.Time
	decidedMS, committedMS  []uint64
	bundle                  []string
}

func (r *versionRows) columns() []any {
	return []any{r.org, r.project, r.branch, r.version, r.parent, r.baseBranch, r.baseVersion, r.ts, r.tsMS,
		r.scalars, r.stateHash, r.itemsChanged, r.mutations, r.applied, r.errored, r.newChunks, r.newBytes,
		r.sourcePartition, r.sourceOffset, r.kafkaPartition, r.kafkaOffset,
		r.decidedAt, r.decidedMS, r.committedAt, r.committedMS, r.bundle}
}

type mutationRows struct {
	org, project, branch      []string
	version                   []uint64
	seq                       []uint32
	clientGroup, client       []string
	id                        []uint64
	name, args, argsHash      []string
	argsSize                  []uint64
	status, errMsg, principal []string
	clientTS                  []time.Time
	clientMS                  []uint64
	receivedAt                []time.Time
	receivedMS                []uint64
	appliedAt                 []time.Time
	appliedMS                 []uint64
	sourcePartition           []int32
	sourceOffset              []int64
	kafkaOffset               []int64
	errorCode                 []string
	decidedAt, committedAt    []time.Time
	decidedMS, committedMS    []uint64
	jobKind, jobPrincipal     []string
	jobAt                     []time.Time
	jobMS                     []uint64
	originProject             []string
	originBranch              []string
	originVersion             []uint64
	originClient              []string
	originID                  []uint64
	bundle                    []string
}

func (r *mutationRows) columns() []any {
	return []any{r.org, r.project, r.branch, r.version, r.seq, r.clientGroup, r.client, r.id, r.name, r.args,
		r.argsHash, r.argsSize, r.status, r.errMsg, r.principal, r.clientTS, r.clientMS, r.receivedAt, r.receivedMS,
		r.appliedAt, r.appliedMS, r.sourcePartition, r.sourceOffset, r.kafkaOffset,
		r.errorCode, r.decidedAt, r.decidedMS, r.committedAt, r.committedMS, r.jobKind, r.jobPrincipal, r.jobAt, r.jobMS,
		r.originProject, r.originBranch, r.originVersion, r.originClient, r.originID, r.bundle}
}

// blobRows are the rows of bodies and of chunks: bytes by hash within a
// project. A row's bytes are kept as the parts they are made of (a body's
// chunks, as read), and joined only into the insert's buffer.
type blobRows struct {
	org, project, hash []string
	size               []uint64
	data               [][][]byte
	kafkaOffset        []int64
	// n is the bytes of all rows.
	n int
}

func (r *blobRows) add(org, project, hash string, parts [][]byte, offset int64) {
	var n uint64
	for _, p := range parts {
		n += uint64(len(p))
	}
	r.org = append(r.org, org)
	r.project = append(r.project, project)
	r.hash = append(r.hash, hash)
	r.size = append(r.size, n)
	r.data = append(r.data, parts)
	r.kafkaOffset = append(r.kafkaOffset, offset)
	r.n += int(n)
}

type branchRows struct {
	org, project, branch, ancestor []string
	depth                          []uint32
	upto                           []uint64
	kafkaOffset                    []int64
}

func (r *branchRows) columns() []any {
	return []any{r.org, r.project, r.branch, r.ancestor, r.depth, r.upto, r.kafkaOffset}
}

// ancestor is a branch a branch's state comes from: depth 0 is the branch
// itself, 1 its base, 2 its base's base …; upto is the last version of it
// that the branch sees (0 for the branch itself: all of them).
type ancestor struct {
	branch string
	depth  uint32
	upto   uint64
}

type itemRows struct {
	org, project, branch []string
	version              []uint64
	collection, id, op   []string
	meta, hash           []string
	size                 []uint64
	chunks, newChunks    []uint32
	newBytes             []uint64
	ts                   []time.Time
	tsMS                 []uint64
	kafkaOffset          []int64
}

func (r *itemRows) columns() []any {
	return []any{r.org, r.project, r.branch, r.version, r.collection, r.id, r.op, r.meta, r.hash, r.size,
		r.chunks, r.newChunks, r.newBytes, r.ts, r.tsMS, r.kafkaOffset}
}

type scalarRows struct {
	org, project, branch      []string
	version                   []uint64
	name, op, value, previous []string
	ts                        []time.Time
	tsMS                      []uint64
	kafkaOffset               []int64
}

func (r *scalarRows) columns() []any {
	return []any{r.org, r.project, r.branch, r.version, r.name, r.op, r.value, r.previous, r.ts, r.tsMS, r.kafkaOffset}
}

// table names a history table and the columns its INSERT lists, in the
// order of the rows' columns(), and its sorting key (the ORDER BY of
// migrations/0001_history_tables.sql and 0002_analysts.sql).
type table struct {
	name    string
	columns []string
	key     []string
}

var (
	versionsTable = table{"versions", []string{"org", "project", "branch", "version", "parent", "base_branch",
		"base_version", "ts", "ts_ms", "scalars", "state_hash", "items_changed", "mutations", "mutations_applied",
		"mutations_error", "new_chunks", "new_bytes", "source_partition", "source_offset", "kafka_partition", "kafka_offset",
		"decided_at", "decided_ms", "committed_at", "committed_ms", "bundle"},
		[]string{"org", "project", "branch", "version"}}
	mutationsTable = table{"mutations", []string{"org", "project", "branch", "version", "seq", "client_group",
		"client", "mutation_id", "name", "args", "args_hash", "args_size", "status", "error", "principal",
		"client_ts", "client_ts_ms", "received_at", "received_ms", "applied_at", "applied_ms",
		"source_partition", "source_offset", "kafka_offset",
		"error_code", "decided_at", "decided_ms", "committed_at", "committed_ms", "job_kind", "job_principal", "job_at", "job_ms",
		"origin_project", "origin_branch", "origin_version", "origin_client", "origin_mutation_id", "bundle"},
		[]string{"org", "project", "branch", "version", "seq"}}
	itemsTable = table{"item_changes", []string{"org", "project", "branch", "version", "collection", "item_id",
		"op", "meta", "hash", "size", "chunks", "new_chunks", "new_bytes", "ts", "ts_ms", "kafka_offset"},
		[]string{"org", "project", "branch", "collection", "item_id", "version"}}
	scalarsTable = table{"scalar_changes", []string{"org", "project", "branch", "version", "name", "op", "value",
		"previous", "ts", "ts_ms", "kafka_offset"},
		[]string{"org", "project", "branch", "name", "version"}}
	bodiesTable = table{"bodies", []string{"org", "project", "hash", "size", "body", "kafka_offset"},
		[]string{"org", "project", "hash"}}
	chunksTable = table{"chunks", []string{"org", "project", "hash", "size", "data", "kafka_offset"},
		[]string{"org", "project", "hash"}}
	branchesTable = table{"branches", []string{"org", "project", "branch", "ancestor", "depth", "upto", "kafka_offset"},
		[]string{"org", "project", "branch", "ancestor"}}
)

// Scalar change operations.
const (
	ScalarSet    = "set"
	ScalarDelete = "delete"
)

// rows is one batch of rows for the history tables.
type rows struct {
	versions  versionRows
	mutations mutationRows
	items     itemRows
	scalars   scalarRows
	bodies    blobRows
	chunks    blobRows
	branches  branchRows
	// argBytes is the bytes of the mutations' args.
	argBytes int
}

// bytes is the bytes of the batch's bodies, chunks and args: almost all
// of what its inserts send when items are large.
func (b *rows) bytes() int {
	return b.bodies.n + b.chunks.n + b.argBytes
}

// len is the number of rows of all tables.
func (b *rows) len() int {
	return len(b.versions.org) + len(b.mutations.org) + len(b.items.org) + len(b.scalars.org) +
		len(b.bodies.org) + len(b.chunks.org) + len(b.branches.org)
}

// addBranch appends the ancestry of a branch.
func (b *rows) addBranch(org, project, branch string, as []ancestor, offset int64) {
	r := &b.branches
	for _, a := range as {
		r.org = append(r.org, org)
		r.project = append(r.project, project)
		r.branch = append(r.branch, branch)
		r.ancestor = append(r.ancestor, a.branch)
		r.depth = append(r.depth, a.depth)
		r.upto = append(r.upto, a.upto)
		r.kafkaOffset = append(r.kafkaOffset, offset)
	}
}

// newChunk is a chunk/v1 record seen before the version that uses it.
type newChunk struct {
	size    int64
	claimed bool
}

// scalarSet is a version's scalars as compact JSON texts by name.
type scalarSet map[string]string

// compactScalars returns the scalars as compact JSON texts, and the whole
// object as compact JSON with sorted names.
func compactScalars(sc map[string]json.RawMessage) (scalarSet, string, error) {
	out := make(scalarSet, len(sc))
	var buf bytes.Buffer
	for name, v := range sc {
		buf.Reset()
		if err := json.Compact(&buf, v); err != nil {
			return nil, "", err
		}
		out[name] = buf.String()
	}
	return out, out.json(), nil
}

// json is the set as one compact JSON object with sorted names.
func (s scalarSet) json() string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		q, _ := json.Marshal(n)
		b.Write(q)
		b.WriteByte(':')
		b.WriteString(s[n])
	}
	b.WriteByte('}')
	return b.String()
}

// parseScalarSet reads the scalars column of the versions table.
func parseScalarSet(s string) (scalarSet, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	out, _, err := compactScalars(m)
	return out, err
}

// scalarDiff is one changed scalar between two versions.
type scalarDiff struct {
	name, op, value, previous string
}

// diffScalars lists what changed from prev to cur, by name.
func diffScalars(prev, cur scalarSet) []scalarDiff {
	var out []scalarDiff
	for name, v := range cur {
		if p, ok := prev[name]; !ok || p != v {
			out = append(out, scalarDiff{name: name, op: ScalarSet, value: v, previous: p})
		}
	}
	for name, p := range prev {
		if _, ok := cur[name]; !ok {
			out = append(out, scalarDiff{name: name, op: ScalarDelete, previous: p})
		}
	}
	slices.SortFunc(out, func(a, b scalarDiff) int { return cmpString(a.name, b.name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// msTime turns milliseconds since the epoch into a time for a DateTime
// column (whole seconds; the _ms column keeps the milliseconds).
func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Unix(0, 0).UTC()
	}
	return time.UnixMilli(ms).UTC()
}

func nonNegative(ms int64) uint64 {
	if ms < 0 {
		return 0
	}
	return uint64(ms)
}

// addVersion appends the rows of one version record: the version, its
// mutations, its item changes and its scalar changes against prev (the
// scalars of the version before it on its branch, or of its base).
// chunks are the chunk records that came just before it in its partition:
// an item change's new chunks and bytes are those of its chunks among
// them, each counted once.
//
// committed is the version record's timestamp (ms), written inside the
// sequencer's transaction; bigArgs are the args kept as chunks,
// reassembled, by their outcome's index (missing when they could not be).
func (b *rows) addVersion(v *schemas.Version, partition int32, offset int64, committed int64, cur scalarSet, curJSON string,
	prev scalarSet, chunks map[string]*newChunk, bigArgs map[int]string) {
	ts := msTime(v.TS)
	tsMS := nonNegative(v.TS)
	decidedAt, decidedMS := msTime(v.DecidedAt), nonNegative(v.DecidedAt)
	committedAt, committedMS := msTime(committed), nonNegative(committed)

	var verNewChunks uint32
	var verNewBytes uint64
	claim := func(hashes []string) (n uint32, size uint64) {
		for _, h := range hashes {
			if c, ok := chunks[h]; ok && !c.claimed {
				c.claimed = true
				n++
				size += uint64(c.size)
			}
		}
		verNewChunks += n
		verNewBytes += size
		return n, size
	}

	it := &b.items
	for i := range v.Items {
		ic := &v.Items[i]
		n, size := claim(ic.Chunks)
		it.org = append(it.org, v.Org)
		it.project = append(it.project, v.Project)
		it.branch = append(it.branch, v.Branch)
		it.version = append(it.version, v.Version)
		it.collection = append(it.collection, ic.Collection)
		it.id = append(it.id, ic.ID)
		it.op = append(it.op, ic.Op)
		it.meta = append(it.meta, string(ic.Meta))
		it.hash = append(it.hash, ic.Hash)
		it.size = append(it.size, uint64(max(ic.Size, 0)))
		it.chunks = append(it.chunks, uint32(len(ic.Chunks)))
		it.newChunks = append(it.newChunks, n)
		it.newBytes = append(it.newBytes, size)
		it.ts = append(it.ts, ts)
		it.tsMS = append(it.tsMS, tsMS)
		it.kafkaOffset = append(it.kafkaOffset, offset)
	}

	var applied, errored uint32
	mr := &b.mutations
	for i := range v.Mutations {
		o := &v.Mutations[i]
		switch o.Status {
		case schemas.StatusApplied:
			applied++
		case schemas.StatusError:
			errored++
		}
		args, argsHash, argsSize := string(o.Args), "", uint64(len(o.Args))
		if args == "null" {
			args = ""
		}
		if o.ArgsRef != nil {
			claim(o.ArgsRef.Chunks)
			args, argsHash, argsSize = bigArgs[i], o.ArgsRef.Hash, uint64(max(o.ArgsRef.Size, 0))
		}
		mr.org = append(mr.org, v.Org)
		mr.project = append(mr.project, v.Project)
		mr.branch = append(mr.branch, v.Branch)
		mr.version = append(mr.version, v.Version)
		mr.seq = append(mr.seq, uint32(i))
		mr.clientGroup = append(mr.clientGroup, o.ClientGroup)
		mr.client = append(mr.client, o.Client)
		mr.id = append(mr.id, o.ID)
		mr.name = append(mr.name, o.Name)
		mr.args = append(mr.args, args)
		b.argBytes += len(args)
		mr.argsHash = append(mr.argsHash, argsHash)
		mr.argsSize = append(mr.argsSize, argsSize)
		mr.status = append(mr.status, o.Status)
		mr.errMsg = append(mr.errMsg, o.Error)
		mr.principal = append(mr.principal, o.Principal)
		mr.clientTS = append(mr.clientTS, msTime(o.TS))
		mr.clientMS = append(mr.clientMS, nonNegative(o.TS))
		mr.receivedAt = append(mr.receivedAt, msTime(o.ReceivedAt))
		mr.receivedMS = append(mr.receivedMS, nonNegative(o.ReceivedAt))
		mr.appliedAt = append(mr.appliedAt, ts)
		mr.appliedMS = append(mr.appliedMS, tsMS)
		mr.sourcePartition = append(mr.sourcePartition, v.Source.Partition)
		mr.sourceOffset = append(mr.sourceOffset, o.Offset)
		mr.kafkaOffset = append(mr.kafkaOffset, offset)
		mr.errorCode = append(mr.errorCode, o.Code)
		mr.decidedAt = append(mr.decidedAt, decidedAt)
		mr.decidedMS = append(mr.decidedMS, decidedMS)
		mr.committedAt = append(mr.committedAt, committedAt)
		mr.committedMS = append(mr.committedMS, committedMS)
		mr.bundle = append(mr.bundle, v.Bundle)
		var job schemas.Job
		if o.Job != nil {
			job = *o.Job
		}
		mr.jobKind = append(mr.jobKind, job.Kind)
		mr.jobPrincipal = append(mr.jobPrincipal, job.Principal)
		mr.jobAt = append(mr.jobAt, msTime(job.At))
		mr.jobMS = append(mr.jobMS, nonNegative(job.At))
		var origin schemas.Origin
		if o.Origin != nil {
			origin = *o.Origin
		}
		mr.originProject = append(mr.originProject, origin.Project)
		mr.originBranch = append(mr.originBranch, origin.Branch)
		mr.originVersion = append(mr.originVersion, origin.Version)
		mr.originClient = append(mr.originClient, origin.Client)
		mr.originID = append(mr.originID, origin.ID)
	}

	sr := &b.scalars
	for _, d := range diffScalars(prev, cur) {
		sr.org = append(sr.org, v.Org)
		sr.project = append(sr.project, v.Project)
		sr.branch = append(sr.branch, v.Branch)
		sr.version = append(sr.version, v.Version)
		sr.name = append(sr.name, d.name)
		sr.op = append(sr.op, d.op)
		sr.value = append(sr.value, d.value)
		sr.previous = append(sr.previous, d.previous)
		sr.ts = append(sr.ts, ts)
		sr.tsMS = append(sr.tsMS, tsMS)
		sr.kafkaOffset = append(sr.kafkaOffset, offset)
	}

	vr := &b.versions
	baseBranch, baseVersion := "", uint64(0)
	if v.Base != nil {
		baseBranch, baseVersion = v.Base.Branch, v.Base.Version
	}
	vr.org = append(vr.org, v.Org)
	vr.project = append(vr.project, v.Project)
	vr.branch = append(vr.branch, v.Branch)
	vr.version = append(vr.version, v.Version)
	vr.parent = append(vr.parent, v.Parent)
	vr.baseBranch = append(vr.baseBranch, baseBranch)
	vr.baseVersion = append(vr.baseVersion, baseVersion)
	vr.ts = append(vr.ts, ts)
	vr.tsMS = append(vr.tsMS, tsMS)
	vr.scalars = append(vr.scalars, curJSON)
	vr.stateHash = append(vr.stateHash, v.StateHash)
	vr.itemsChanged = append(vr.itemsChanged, uint32(len(v.Items)))
	vr.mutations = append(vr.mutations, uint32(len(v.Mutations)))
	vr.applied = append(vr.applied, applied)
	vr.errored = append(vr.errored, errored)
	vr.newChunks = append(vr.newChunks, verNewChunks)
	vr.newBytes = append(vr.newBytes, verNewBytes)
	vr.sourcePartition = append(vr.sourcePartition, v.Source.Partition)
	vr.sourceOffset = append(vr.sourceOffset, v.Source.Offset)
	vr.kafkaPartition = append(vr.kafkaPartition, partition)
	vr.kafkaOffset = append(vr.kafkaOffset, offset)
	vr.decidedAt = append(vr.decidedAt, decidedAt)
	vr.decidedMS = append(vr.decidedMS, decidedMS)
	vr.committedAt = append(vr.committedAt, committedAt)
	vr.committedMS = append(vr.committedMS, committedMS)
	vr.bundle = append(vr.bundle, v.Bundle)
}
