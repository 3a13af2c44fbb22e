package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchemas compiles the embedded JSON Schema documents, which refer
// to each other by their $id.
func compileSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	ids := map[string]string{}
	for _, kind := range jsonKinds {
		doc, ok := JSONSchema(schemaOf(kind))
		if !ok {
			t.Fatalf("no JSON Schema for %s", schemaOf(kind))
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		id, _ := v.(map[string]any)["$id"].(string)
		if !strings.HasSuffix(id, "/schemas/jsonschema/"+kind+".v1.json") {
			t.Fatalf("%s: $id %q does not name the file", kind, id)
		}
		if err := c.AddResource(id, v); err != nil {
			t.Fatal(err)
		}
		ids[kind] = id
	}
	out := map[string]*jsonschema.Schema{}
	for kind, id := range ids {
		s, err := c.Compile(id)
		if err != nil {
			t.Fatalf("compile %s: %v", id, err)
		}
		out[kind] = s
	}
	return out
}

func schemaValidate(t *testing.T, s *jsonschema.Schema, value []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func TestJSONSchemaAcceptsValidGoldenFiles(t *testing.T) {
	schemas := compileSchemas(t)
	for _, kind := range jsonKinds {
		for _, g := range loadGolden(t, kind, "valid") {
			if err := schemaValidate(t, schemas[kind], g.value); err != nil {
				t.Errorf("%s/%s: %v", kind, g.name, err)
			}
		}
	}
}

// What the decoders check and a JSON Schema cannot say. Every other invalid
// golden file must be rejected by the JSON Schema too, and every file
// listed here must be accepted by it, so that the list stays true.
var schemaCannotSay = map[string]string{
	"deploy/hash_mismatch":               "hash is the SHA-256 of another member",
	"mutation/id_exponent":               "type integer accepts integral numbers written with an exponent",
	"mutation/id_integral_float":         "type integer accepts 42.0",
	"mutation/id_duplicate":              "JSON Schema sees the object after a parser dropped one duplicate",
	"version/parent_mismatch":            "parent = version - 1 relates two members",
	"version/items_unsorted":             "order of array elements by two members",
	"version/items_duplicate":            "uniqueness of (collection, id)",
	"version/put_more_chunks_than_bytes": "the number of chunks is bounded by the value of size",
	"version/meta_not_canonical":         "canonical JSON (RFC 8785) is about bytes, not values",
	"version/scalars_duplicate":          "JSON Schema sees the object after a parser dropped one duplicate",
	"version/base_own_branch":            "base.branch differs from branch relates two members",
	"rejected/value_not_base64":          "contentEncoding is an annotation, not an assertion, in draft 2020-12",
	"mutation/trailing_data":             "not JSON: no JSON Schema applies",
	"mutation/truncated":                 "not JSON: no JSON Schema applies",
	"mutation/empty_value":               "not JSON: no JSON Schema applies",
}

func TestJSONSchemaRejectsInvalidGoldenFiles(t *testing.T) {
	schemas := compileSchemas(t)
	seen := map[string]bool{}
	for _, kind := range jsonKinds {
		for _, g := range loadGolden(t, kind, "invalid") {
			name := kind + "/" + g.name
			seen[name] = true
			why, cannot := schemaCannotSay[name]
			err := schemaValidate(t, schemas[kind], g.value)
			notJSON := strings.HasPrefix(why, "not JSON")
			switch {
			case cannot && notJSON:
				if err == nil {
					t.Errorf("%s: listed as not JSON, but parsed and validated", name)
				}
			case cannot && err == nil:
			case cannot:
				t.Errorf("%s: listed as beyond JSON Schema (%s), but the schema rejects it: %v", name, why, err)
			case err == nil:
				t.Errorf("%s: the JSON Schema accepts it; the decoder says %q", name, g.wantErr)
			}
		}
	}
	for name := range schemaCannotSay {
		if !seen[name] {
			t.Errorf("schemaCannotSay lists %s, which is not a golden file", name)
		}
	}
}

// The JSON Schema and the decoder require the same members: deleting any
// member of any object of a valid golden file makes both fail or both
// pass.
func TestJSONSchemaRequiresWhatTheDecoderRequires(t *testing.T) {
	schemas := compileSchemas(t)
	for _, kind := range jsonKinds {
		for _, g := range loadGolden(t, kind, "valid") {
			var doc any
			dec := json.NewDecoder(bytes.NewReader(g.value))
			dec.UseNumber() // keep ids over 2^53 exact
			if err := dec.Decode(&doc); err != nil {
				t.Fatal(err)
			}
			for _, p := range memberPaths(doc, nil) {
				cut := deleteAt(doc, p)
				value, err := json.Marshal(cut)
				if err != nil {
					t.Fatal(err)
				}
				_, decErr := decode(kind, value, DefaultLimits())
				schErr := schemaValidate(t, schemas[kind], value)
				if (decErr == nil) != (schErr == nil) {
					t.Errorf("%s/%s without %s: decoder error %v, JSON Schema error %v", kind, g.name, strings.Join(p, "."), decErr, schErr)
				}
			}
		}
	}
}

// memberPaths lists the path of every object member in v, at any depth,
// except inside the opaque JSON of args, meta and scalar values.
func memberPaths(v any, prefix []string) [][]string {
	var out [][]string
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := append(slices.Clone(prefix), k)
			out = append(out, p)
			if k == "args" || k == "meta" || len(prefix) > 0 && prefix[len(prefix)-1] == "scalars" {
				continue
			}
			out = append(out, memberPaths(v[k], p)...)
		}
	case []any:
		for i, e := range v {
			out = append(out, memberPaths(e, append(slices.Clone(prefix), fmt.Sprint(i)))...)
		}
	}
	return out
}

// deleteAt returns a deep copy of v without the member at path p.
func deleteAt(v any, p []string) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, e := range v {
			if len(p) == 1 && k == p[0] {
				continue
			}
			if len(p) > 1 && k == p[0] {
				e = deleteAt(e, p[1:])
			}
			c[k] = e
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, e := range v {
			if len(p) > 1 && fmt.Sprint(i) == p[0] {
				e = deleteAt(e, p[1:])
			}
			c[i] = e
		}
		return c
	}
	return v
}
