package schemas

import "fmt"

// ChangelogRecord is one decoded record of canon.versions: exactly one of
// its fields is set.
type ChangelogRecord struct {
	Chunk   *Chunk
	Version *Version
	// Deploy is a bundle activation (a deploy/v1 record with Source set).
	Deploy *Deploy
}

// DecodeChangelog decodes a record of canon.versions by its schema header:
// a chunk (hashHeader is its HeaderChunkHash header, key its record key),
// a version or a bundle activation. Exactly one field of the result is
// set when err is nil. It is the one dispatch from the header to the
// decoder for every changelog reader.
func DecodeChangelog(schema, hashHeader string, key, value []byte, l Limits) (ChangelogRecord, error) {
	kind, _, err := ParseSchema(schema)
	if err != nil {
		return ChangelogRecord{}, err
	}
	var r ChangelogRecord
	switch kind {
	case KindChunk:
		r.Chunk, err = DecodeChunk(schema, hashHeader, key, value, l)
	case KindVersion:
		r.Version, err = DecodeVersion(schema, value, l)
	case KindDeploy:
		r.Deploy, err = DecodeDeploy(schema, value)
		if err == nil && r.Deploy.Source == nil {
			err = fmt.Errorf("%s: %w", schema, &FieldError{Field: "source", Reason: "is missing: a deploy in the changelog names its position in canon.mutations"})
		}
	default:
		err = fmt.Errorf("%w: %q is not a record of the changelog (%s, %s or %s)", ErrUnknownSchema, schema, SchemaChunkV1, SchemaVersionV1, SchemaDeployV1)
	}
	if err != nil {
		return ChangelogRecord{}, err
	}
	return r, nil
}
