// Package schematest checks Go types against the JSON Schema documents
// that describe them (schemas/jsonschema for the records,
// docs/openapi.yaml for the wire types): the same members, the same
// required ones (those the Go type always writes), the same JSON types,
// at every depth and both ways. Tests use it; it is the one such checker.
package schematest

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Docs are the documents a check resolves $ref in, by name; a $ref with
// no file part stays in the document it is in.
type Docs struct {
	Files map[string]map[string]any
	// Describes names the documents in messages ("the JSON Schema").
	Describes string
	// Optional are members a Go type always writes but a reader does not
	// require, by "GoType.member".
	Optional map[string]string
	// RawJSON, when set, checks the schema (before its $ref is followed)
	// of a json.RawMessage member; nil accepts any.
	RawJSON func(node map[string]any) bool
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

// Compare reports, as errors of t, where Go type typ and the schema node
// of document doc differ; path names typ in the messages.
func (d *Docs) Compare(t testing.TB, path string, typ reflect.Type, doc string, node map[string]any) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == rawMessage {
		if d.RawJSON != nil && !d.RawJSON(node) {
			t.Errorf("%s: any JSON (json.RawMessage) in Go, %v in %s", path, node, d.Describes)
		}
		return
	}
	doc, node = d.resolve(t, doc, node)
	want := ""
	switch typ.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Slice, reflect.Array:
		want = "array"
		if typ.Elem().Kind() == reflect.Uint8 {
			want = "string" // encoding/json writes []byte in base64
		}
	case reflect.Map, reflect.Struct:
		want = "object"
	default:
		t.Errorf("%s: Go type %v has no JSON type", path, typ)
		return
	}
	if types := jsonTypes(node); !slices.Contains(types, want) {
		t.Errorf("%s: %s in Go (%v), %v in %s", path, want, typ, types, d.Describes)
		return
	}
	switch {
	case want == "array":
		items, ok := node["items"].(map[string]any)
		if !ok {
			t.Errorf("%s: an array without items in %s", path, d.Describes)
			return
		}
		d.Compare(t, path+"[]", typ.Elem(), doc, items)
	case typ.Kind() == reflect.Map:
		if add, ok := node["additionalProperties"].(map[string]any); ok {
			d.Compare(t, path+"{}", typ.Elem(), doc, add)
		} else if typ.Elem() != rawMessage {
			t.Errorf("%s: a map of %v in Go, an object without additionalProperties in %s", path, typ.Elem(), d.Describes)
		}
	case typ.Kind() == reflect.Struct:
		d.compareMembers(t, path, typ, doc, node)
	}
}

func (d *Docs) compareMembers(t testing.TB, path string, typ reflect.Type, doc string, node map[string]any) {
	t.Helper()
	props, _ := node["properties"].(map[string]any)
	var required []string
	if r, ok := node["required"].([]any); ok {
		for _, x := range r {
			required = append(required, x.(string))
		}
	}
	ms := members(typ)
	for name, m := range ms {
		at := path + "." + name
		p, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("%s: a member of %v, not in %s", at, typ, d.Describes)
			continue
		}
		req := slices.Contains(required, name)
		if _, optional := d.Optional[typ.Name()+"."+name]; !optional && req == m.omitempty {
			t.Errorf("%s: omitempty %v in Go, required %v in %s", at, m.omitempty, req, d.Describes)
		}
		d.Compare(t, at, m.typ, doc, p)
	}
	for name := range props {
		if _, ok := ms[name]; !ok {
			t.Errorf("%s.%s: in %s, not a member of %v", path, name, d.Describes, typ)
		}
	}
	for _, name := range required {
		if _, ok := ms[name]; !ok {
			t.Errorf("%s.%s: required in %s, not a member of %v", path, name, d.Describes, typ)
		}
	}
}

// resolve follows $ref (within a document or to another one by file
// name) and returns the schema and the document it is in.
func (d *Docs) resolve(t testing.TB, doc string, node map[string]any) (string, map[string]any) {
	t.Helper()
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return doc, node
		}
		file, pointer, _ := strings.Cut(ref, "#")
		if file != "" {
			doc = file
		}
		next, ok := d.Files[doc]
		if !ok {
			t.Fatalf("$ref %q: no document %s", ref, doc)
		}
		for _, part := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
			if part == "" {
				continue
			}
			if next, ok = next[part].(map[string]any); !ok {
				t.Fatalf("$ref %q does not resolve in %s", ref, doc)
			}
		}
		node = next
	}
}

// jsonTypes are the JSON types a schema allows: its type, or those of
// the values of its enum or const.
func jsonTypes(node map[string]any) []string {
	switch v := node["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, x.(string))
		}
		return out
	}
	values, _ := node["enum"].([]any)
	if c, ok := node["const"]; ok {
		values = append(values, c)
	}
	var out []string
	for _, v := range values {
		switch v.(type) {
		case string:
			out = append(out, "string")
		case float64:
			out = append(out, "number", "integer")
		case bool:
			out = append(out, "boolean")
		case nil:
			out = append(out, "null")
		}
	}
	return out
}

type member struct {
	typ       reflect.Type
	omitempty bool
}

// members lists the JSON members of struct type t as encoding/json
// writes them, embedded structs' members included.
func members(t reflect.Type) map[string]member {
	out := map[string]member{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, m := range members(f.Type) {
				out[n] = m
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = member{typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}
