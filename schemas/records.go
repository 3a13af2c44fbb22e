package schemas

import "encoding/json"

// HeaderSchema is the record header that names a record's kind and major
// version, e.g. "mutation/v1". Readers reject unknown kinds and majors;
// new optional fields within a major are backward compatible.
const HeaderSchema = "canon-schema"

// HeaderChunkHash carries the SHA-256 (lower-case hex) of a chunk/v1 body.
const HeaderChunkHash = "canon-chunk"

// Schema header values of the records Canon writes.
const (
	SchemaMutationV1 = "mutation/v1"
	SchemaVersionV1  = "version/v1"
	SchemaChunkV1    = "chunk/v1"
	SchemaRejectedV1 = "rejected/v1"
)

// Mutation is a client's request to change a project: data, not state. It
// is the value of a mutation/v1 record in canon.mutations, keyed by
// ProjectKey(Org, Project).
type Mutation struct {
	Org     string `json:"org"`
	Project string `json:"project"`
	// Branch is the branch the mutation applies to ("main" by default).
	Branch string `json:"branch"`
	// ClientGroup groups the clients of one user agent (a Replicache client
	// group); it is bound to the principal that first used it.
	ClientGroup string `json:"clientGroup"`
	// Client identifies the client; ID increases by exactly 1 per
	// (project, client), starting at 1.
	Client string `json:"client"`
	ID     uint64 `json:"id"`
	// Name selects the mutator; Args are its JSON arguments.
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
	// TS is the client's clock when it made the mutation, in milliseconds
	// since the epoch. Informational: mutators see the record timestamp.
	TS int64 `json:"ts,omitempty"`
	// Principal and ReceivedAt (ms) are stamped by the ingest.
	Principal  string `json:"principal,omitempty"`
	ReceivedAt int64  `json:"receivedAt,omitempty"`
	// Job and Origin are set by a job that re-sends mutations of other
	// history (rebase, replay): which run sent it, and the mutation it
	// re-sends. The sequencer copies them into the Outcome.
	Job    *Job    `json:"job,omitempty"`
	Origin *Origin `json:"origin,omitempty"`
}

// Job is a run of a pipeline job (rebase, replay, import) that sent a
// mutation: its kind, who ran it and when it started (ms since the
// epoch). The mutation's own TS and record timestamp stay those of the
// original, since replaying them is what makes the state the same.
type Job struct {
	Kind      string `json:"kind"`
	Principal string `json:"principal,omitempty"`
	At        int64  `json:"at"`
}

// Origin is the mutation a job re-sent: its branch (Project is org/project
// when it was in another project), the version that recorded it there,
// and its client and id.
type Origin struct {
	Project string `json:"project,omitempty"`
	Branch  string `json:"branch"`
	Version uint64 `json:"version"`
	Client  string `json:"client"`
	ID      uint64 `json:"id"`
}

// Mutation statuses in a version record.
const (
	StatusApplied = "applied"
	StatusError   = "error"
)

// Outcome is what became of one mutation in a version: applied, or
// recorded with its mutator's error (the client's last id advances either
// way).
type Outcome struct {
	ClientGroup string `json:"clientGroup"`
	Client      string `json:"client"`
	ID          uint64 `json:"id"`
	Name        string `json:"name"`
	// Args are the mutation's arguments when they are at most
	// InlineArgsBytes long. Larger args are stored like item bodies, as
	// content-addressed chunks named by ArgsRef, and Args is null: a client
	// that re-sends a 100 KB body with one byte changed then costs a few KB
	// of storage, not 100 KB.
	Args       json.RawMessage `json:"args"`
	ArgsRef    *BlobRef        `json:"argsRef,omitempty"`
	Status     string          `json:"status"`
	Error      string          `json:"error,omitempty"`
	TS         int64           `json:"ts,omitempty"`
	Principal  string          `json:"principal,omitempty"`
	ReceivedAt int64           `json:"receivedAt,omitempty"`
	// Offset of the mutation record in canon.mutations (same partition as
	// the version).
	Offset int64 `json:"offset"`
	// Code is the stable code of an error outcome (Error has the message,
	// with ids in it); the codes are listed in docs/mutators.md.
	Code string `json:"code,omitempty"`
	// Job and Origin are the mutation's (see Mutation).
	Job    *Job    `json:"job,omitempty"`
	Origin *Origin `json:"origin,omitempty"`
}

// Item operations in a version record.
const (
	OpPut    = "put"
	OpDelete = "delete"
)

// ItemChange is one item written or deleted by a version. A put names the
// body by content hash and lists the chunks whose concatenation is the
// body; the chunks are chunk/v1 records of the same transaction or of an
// earlier one.
type ItemChange struct {
	Collection string `json:"collection"`
	ID         string `json:"id"`
	Op         string `json:"op"`
	// Meta is the item's small metadata (canonical JSON), listed without
	// the body.
	Meta json.RawMessage `json:"meta,omitempty"`
	// Hash is the SHA-256 (hex) of the body, which is canonical JSON.
	Hash string `json:"hash,omitempty"`
	// Size is the body's length in bytes.
	Size int64 `json:"size,omitempty"`
	// Chunks are the SHA-256 (hex) of the body's chunks, in order.
	Chunks []string `json:"chunks,omitempty"`
}

// InlineArgsBytes is the largest args kept inline in a version record;
// larger ones are stored as chunks and named by Outcome.ArgsRef.
const InlineArgsBytes = 4 << 10

// BlobRef names bytes stored as chunks in a project's namespace: their
// SHA-256, length, and the chunks whose concatenation they are.
type BlobRef struct {
	Hash   string   `json:"hash"`
	Size   int64    `json:"size"`
	Chunks []string `json:"chunks"`
}

// BranchRef names a version of a branch.
type BranchRef struct {
	Branch  string `json:"branch"`
	Version uint64 `json:"version"`
}

// Version is one new version of a (project, branch): the value of a
// version/v1 record in canon.versions, keyed by ProjectKey(Org, Project).
// It carries everything needed to rebuild the store: a store applies
// versions in changelog order and reaches the same state.
type Version struct {
	Org     string `json:"org"`
	Project string `json:"project"`
	Branch  string `json:"branch"`
	// Version counts from 1 per (project, branch) without gaps; Parent is
	// Version-1 (0 for the first).
	Version uint64 `json:"version"`
	Parent  uint64 `json:"parent"`
	// Base is set on the first version of a branch made by branch.create:
	// the branch starts as Base's state (item bodies are shared by hash,
	// never copied), and Items lists only what changed on top of it.
	Base *BranchRef `json:"base,omitempty"`
	// TS is the Kafka timestamp of the mutation record that produced the
	// version, in milliseconds: what the mutators saw as tx.Now().
	TS int64 `json:"ts"`
	// Scalars are all of the project's scalars after this version.
	Scalars map[string]json.RawMessage `json:"scalars"`
	// Items are the items this version changed, sorted by (Collection, ID).
	Items []ItemChange `json:"items"`
	// Mutations are the mutations this version is made of, in canonical
	// order.
	Mutations []Outcome `json:"mutations"`
	// LastIDs is the last mutation id of each client in Mutations, after
	// this version.
	LastIDs map[string]uint64 `json:"lastIds"`
	// StateHash is the hash of the whole state after this version (see
	// StateHasher).
	StateHash string `json:"stateHash"`
	// Source is the position of the last mutation of Mutations in
	// canon.mutations.
	Source SourceRef `json:"source"`
	// DecidedAt is the sequencer's clock when it decided the version (ms),
	// metadata beside TS, which mutators see; 0 in records of releases
	// before it. The version's commit time is its record's timestamp.
	DecidedAt int64 `json:"decidedAt,omitempty"`
	// Bundle is the hash of the mutator bundle (see Deploy) whose mutator
	// decided the version's mutation; empty when a built-in or a Go
	// mutator did. Replays decide the mutation again with that bundle.
	Bundle string `json:"bundle,omitempty"`
}

// SourceRef is a position in a topic.
type SourceRef struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Chunk is a content-addressed piece of an item body: the value of a
// chunk/v1 record, keyed by the project so chunks stay in the project's
// partition and namespace.
type Chunk struct {
	Org     string
	Project string
	// Hash is the SHA-256 of Data, lower-case hex.
	Hash string
	Data []byte
}

// Reason codes of rejected/v1 records.
const (
	ReasonUndecodable   = "undecodable"    // the value is not the JSON its schema says
	ReasonUnknownSchema = "unknown_schema" // no or unknown canon-schema header
	ReasonInvalid       = "invalid"        // a field is missing, of the wrong type or out of range
	ReasonKeyMismatch   = "key_mismatch"   // the record key is not the project's key
	ReasonTooLarge      = "too_large"      // over a size limit
	ReasonGap           = "gap"            // id > last+1: resend from ExpectedID
	ReasonUnauthorized  = "unauthorized"   // the client group belongs to another principal, or the client to another group
	ReasonProjection    = "projection"     // a projector could not handle a changelog record
	ReasonBadBundle     = "bad_bundle"     // a deploy's bundle does not compile
)

// Rejected is a dead letter in canon.rejected, keyed like its source.
type Rejected struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Where the rejected record was.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Schema is the source record's canon-schema header, if any.
	Schema string `json:"schema,omitempty"`
	// Mutation is the decoded mutation when decoding got that far.
	Mutation *Mutation `json:"mutation,omitempty"`
	// ExpectedID is the id the client must send next (reason gap).
	ExpectedID uint64 `json:"expectedId,omitempty"`
	// Value is the start of the source record's value (at most
	// MaxRejectedValueBytes), for undecodable records.
	Value []byte `json:"value,omitempty"`
	// At is when the record was rejected, in milliseconds.
	At int64 `json:"at"`
}

// MaxRejectedValueBytes bounds the copy of a bad value in a rejected record.
const MaxRejectedValueBytes = 16 << 10
