// Package schemas is Canon's contract between components: the names of the
// streams, the partition key of a project and the partition function.
// Components meet here; this package imports nothing of Canon's and does no
// I/O.
package schemas

// Canon's topics. The partition counts of TopicMutations and TopicVersions
// must be equal: a project's mutations and versions live in the partition
// of the same number.
const (
	// TopicMutations is the raw input log, kept indefinitely: replays read it.
	TopicMutations = "canon.mutations"
	// TopicVersions is the canonical changelog, written only inside
	// sequencer transactions and kept indefinitely: every store is rebuilt
	// from it.
	TopicVersions = "canon.versions"
	// TopicRejected holds dead letters with reason codes.
	TopicRejected = "canon.rejected"
)
