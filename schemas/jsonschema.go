package schemas

import "embed"

//go:embed jsonschema/*.json
var jsonSchemas embed.FS

// JSONSchema returns the JSON Schema (draft 2020-12) document of the
// records of a canon-schema header value, e.g. "mutation/v1". ok is false
// for a schema that has none: chunk/v1 values are raw bytes.
//
// The documents describe the records for other languages and tools; the
// decoders of this package are the reference and check more than a JSON
// Schema can say (see docs/schemas.md).
func JSONSchema(schema string) (doc []byte, ok bool) {
	var name string
	switch schema {
	case SchemaMutationV1:
		name = "mutation.v1.json"
	case SchemaVersionV1:
		name = "version.v1.json"
	case SchemaRejectedV1:
		name = "rejected.v1.json"
	case SchemaDeployV1:
		name = "deploy.v1.json"
	default:
		return nil, false
	}
	doc, err := jsonSchemas.ReadFile("jsonschema/" + name)
	return doc, err == nil
}
