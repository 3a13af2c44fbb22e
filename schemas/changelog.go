package schemas

import "fmt"

// DecodeChangelog decodes a record of canon.versions by its schema header:
// a chunk (hashHeader is its HeaderChunkHash header, key its record key)
// or a version. Exactly one of c and v is set when err is nil. It is the
// one dispatch from the header to the decoder for every changelog reader.
func DecodeChangelog(schema, hashHeader string, key, value []byte, l Limits) (c *Chunk, v *Version, err error) {
	kind, _, err := ParseSchema(schema)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case KindChunk:
		c, err = DecodeChunk(schema, hashHeader, key, value, l)
	case KindVersion:
		v, err = DecodeVersion(schema, value, l)
	default:
		err = fmt.Errorf("%w: %q is not a record of the changelog (%s or %s)", ErrUnknownSchema, schema, SchemaChunkV1, SchemaVersionV1)
	}
	if err != nil {
		return nil, nil, err
	}
	return c, v, nil
}
