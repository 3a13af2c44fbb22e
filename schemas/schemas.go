// Package schemas is Canon's contract between components: the names of the
// streams, the partition key of a project and the partition function, the
// records (mutation/v1, version/v1, chunk/v1, rejected/v1), their limits
// and their codecs. Components meet here; this package imports nothing of
// Canon's and does no I/O.
//
// Every record carries its kind and major version in the canon-schema
// header. Decoders are strict about what they know and lenient about what
// they do not: a known member must have the right type and a valid value,
// and an error names it ("items[3].hash"); members they do not know are
// ignored, so that a minor addition needs no new major. Encoders validate
// with the same rules, so a record Canon writes is one it can read. The
// JSON Schema documents of the records (JSONSchema) and docs/schemas.md
// describe them for other languages.
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
