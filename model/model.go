// Package model is Canon's document model and the decision logic: the
// mutator registry and built-in mutators, canonical JSON, content-defined
// chunking of item bodies, and the Decider that turns a mutation into an
// outcome and a version over the committed state plus an in-memory overlay.
// It is pure: it reads state through the Reader interface (the store
// implements it) and does no I/O of its own, so the sequencer and the
// pipelines' dry runs decide identically.
package model

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// Item is an item's content: small metadata, listed without the body, and
// the body. Both are JSON; the model stores them canonicalized (RFC 8785).
type Item struct {
	Meta json.RawMessage `json:"meta"`
	Data json.RawMessage `json:"data"`
}

// ItemRef is what the item index knows of an item, without its body.
type ItemRef struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Meta       json.RawMessage `json:"meta"`
	// Hash is the SHA-256 (hex) of the canonical body; Size its length.
	Hash string `json:"hash"`
	Size int64  `json:"size"`
	// Chunks are the hashes of the body's chunks, in order.
	Chunks []string `json:"chunks"`
	// Version is the branch version that last wrote the item; for an item
	// a branch inherited from its base (branch.create), 1.
	Version uint64 `json:"version"`
}

// Head is the state summary of a branch at a version.
type Head struct {
	// Version is 0 when the branch does not exist.
	Version uint64
	Scalars map[string]json.RawMessage
	// State is the items' digest sum; State.StateHash(Scalars) is the
	// version's state hash.
	State schemas.StateHasher
}

// Reader is the committed state a Decider reads. The store implements it;
// modeltest.MemState is the naive reference implementation.
//
// The Decider never modifies what a Reader returns (Head.Scalars,
// ItemRef.Meta and Chunks, bodies) and keeps references to it until its
// next Reset: an implementation must not hand out buffers it reuses.
type Reader interface {
	// Head returns the latest version of a branch.
	Head(org, project, branch string) (Head, error)
	// HeadAt returns the branch as of version v (v <= its latest); ok is
	// false when the branch has no version v.
	HeadAt(org, project, branch string, v uint64) (h Head, ok bool, err error)
	// ItemRef returns an item at the branch's latest version.
	ItemRef(org, project, branch, collection, id string) (ref ItemRef, ok bool, err error)
	// ItemRefAt returns an item as of version v of the branch (v <= its
	// latest); ok is false when the item did not exist at v. The Decider
	// needs it when a branch created in the current batch from an older
	// version of another branch reads an item it has not written yet.
	ItemRefAt(org, project, branch, collection, id string, v uint64) (ref ItemRef, ok bool, err error)
	// Body returns a body (canonical JSON, as the versions wrote it) by
	// its content hash within the project.
	Body(org, project, hash string) ([]byte, error)
	// HasChunk reports whether the project's namespace holds a chunk.
	HasChunk(org, project, hash string) (bool, error)
	// LastID is the last mutation id of a client on a branch (0: none).
	LastID(org, project, branch, client string) (uint64, error)
	// GroupPrincipal is the principal that owns a client group in a
	// project: the first one that made a version with it; ok is false
	// for a group no principal used yet.
	GroupPrincipal(org, project, group string) (principal string, ok bool, err error)
	// ClientGroup is the client group a client belongs to in a project:
	// the group of the first version that recorded one of its mutations;
	// ok is false for a client no version recorded yet.
	ClientGroup(org, project, client string) (group string, ok bool, err error)
}

// ErrNotFound is returned by Tx.Get and Tx.Delete for a missing item (the
// error says which: test with errors.Is), and by Reader methods for a
// missing body.
var ErrNotFound = errors.New("not found")

// Tx is what a mutator sees: the state of its branch at the canonical
// head, including the effect of the mutations decided before it. Writes
// are applied only if the mutator returns nil. A Tx is valid during its
// mutator's call only.
type Tx interface {
	// Now is the Kafka timestamp of the mutation record: the only clock a
	// mutator may use. It is in UTC and has millisecond precision, like
	// the version's TS, so that a replay from the changelog sees the same
	// instant whatever the machine's time zone.
	Now() time.Time
	// Mutation is the mutation being applied.
	Mutation() *schemas.Mutation
	// Scalar returns a scalar of the project's state.
	Scalar(name string) (json.RawMessage, bool)
	// SetScalar sets a scalar; a nil or JSON null value deletes it.
	SetScalar(name string, value json.RawMessage) error
	// Get returns an item, or ErrNotFound.
	Get(collection, id string) (Item, error)
	// Put writes an item; meta (a JSON object, {} when nil) and data
	// (required) are canonicalized and checked against the limits.
	Put(collection, id string, item Item) error
	// Delete deletes an item, or returns ErrNotFound.
	Delete(collection, id string) error
}

// Mutator is the server-side logic of one mutation name. It must be
// deterministic: no wall clock (use tx.Now), no randomness, no map
// iteration order leaking into what it writes. An error it returns (or a
// panic) is recorded as the mutation's outcome (status error) and nothing
// it wrote is kept. args are the mutation's, valid JSON (nil when absent),
// and must not be modified.
type Mutator func(tx Tx, args json.RawMessage) error

// MutationRecord is a decoded mutation with where it was in Kafka.
type MutationRecord struct {
	Mutation *schemas.Mutation
	// Timestamp is the record's Kafka timestamp.
	Timestamp time.Time
	Partition int32
	Offset    int64
}

// Kind is the outcome of a decision.
type Kind int

const (
	// Applied means the mutator succeeded; Version holds the new version.
	Applied Kind = iota + 1
	// Errored means the mutator failed or is unknown; Version still records the
	// mutation with status error so that the client's last id advances.
	Errored
	// Duplicate means id <= last; nothing is produced.
	Duplicate
	// Gap means id > last+1; nothing is applied; the client must resend from
	// ExpectedID.
	Gap
	// Rejected means the mutation cannot be recorded on its branch: the branch
	// does not exist (only "main" is created by its first mutation, other
	// branches by branch.create), a branch.create that failed on a branch
	// that does not exist, a missing or malformed key field, a client
	// group that belongs to another principal, or a client that belongs to
	// another client group (reason unauthorized). Nothing is produced on
	// the branch and no last id advances; the sequencer writes a rejected
	// record with Reason and Message.
	Rejected
)

func (k Kind) String() string {
	switch k {
	case Applied:
		return "applied"
	case Errored:
		return "error"
	case Duplicate:
		return "duplicate"
	case Gap:
		return "gap"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Decision is what became of one mutation.
type Decision struct {
	Kind Kind
	// Version is the new version, for Applied and Errored. It shares
	// immutable data (scalars, metadata, chunk lists) with the Decider's
	// overlay: it must not be modified.
	Version *schemas.Version
	// Chunks are the chunks the version refers to that are neither in the
	// store nor produced earlier in the same batch; they are produced
	// before the version.
	Chunks []schemas.Chunk
	// LastID is the client's last id before this mutation (Duplicate, Gap,
	// Rejected).
	LastID uint64
	// ExpectedID is the id the client must send next (Gap).
	ExpectedID uint64
	// Reason (a schemas.Reason* code) and Message say why a mutation was
	// Rejected.
	Reason  string
	Message string
}
