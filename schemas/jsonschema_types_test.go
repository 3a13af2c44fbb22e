package schemas

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The record types and their JSON Schema documents agree: the same
// members, the same required ones (those the Go type always writes),
// the same JSON types, at every depth and both ways.
func TestTypesMatchJSONSchema(t *testing.T) {
	docs := map[string]map[string]any{}
	for _, name := range []string{"mutation.v1.json", "version.v1.json", "rejected.v1.json"} {
		b, err := jsonSchemas.ReadFile("jsonschema/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs[name] = doc
	}
	s := &schemaSet{t: t, docs: docs}
	s.compare("mutation/v1", reflect.TypeFor[Mutation](), "mutation.v1.json", docs["mutation.v1.json"])
	s.compare("version/v1", reflect.TypeFor[Version](), "version.v1.json", docs["version.v1.json"])
	s.compare("rejected/v1", reflect.TypeFor[Rejected](), "rejected.v1.json", docs["rejected.v1.json"])
}

type schemaSet struct {
	t    *testing.T
	docs map[string]map[string]any
}

// resolve follows $ref (within a document or to another one by file
// name) and returns the schema and the document it is in.
func (s *schemaSet) resolve(doc string, node map[string]any) (string, map[string]any) {
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return doc, node
		}
		file, pointer, _ := strings.Cut(ref, "#")
		if file != "" {
			doc = file
		}
		next, ok := any(s.docs[doc]).(map[string]any)
		if !ok {
			s.t.Fatalf("$ref %q: no document %s", ref, doc)
		}
		for _, part := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
			if part == "" {
				continue
			}
			if next, ok = next[part].(map[string]any); !ok {
				s.t.Fatalf("$ref %q does not resolve in %s", ref, doc)
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

func (s *schemaSet) compare(path string, typ reflect.Type, doc string, node map[string]any) {
	t := s.t
	t.Helper()
	doc, node = s.resolve(doc, node)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	types := jsonTypes(node)
	if typ == reflect.TypeFor[json.RawMessage]() {
		return // any JSON value; the schema may say more
	}
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
	case reflect.Slice:
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
	if !slices.Contains(types, want) {
		t.Errorf("%s: %s in Go (%v), %v in the JSON Schema", path, want, typ, types)
		return
	}
	switch {
	case want == "array":
		items, ok := node["items"].(map[string]any)
		if !ok {
			t.Errorf("%s: an array without items in the JSON Schema", path)
			return
		}
		s.compare(path+"[]", typ.Elem(), doc, items)
	case typ.Kind() == reflect.Map:
		if add, ok := node["additionalProperties"].(map[string]any); ok {
			s.compare(path+"{}", typ.Elem(), doc, add)
		} else if typ.Elem() != reflect.TypeFor[json.RawMessage]() {
			t.Errorf("%s: a map of %v in Go, an object of any values in the JSON Schema", path, typ.Elem())
		}
	case typ.Kind() == reflect.Struct:
		props, _ := node["properties"].(map[string]any)
		var required []string
		if r, ok := node["required"].([]any); ok {
			for _, x := range r {
				required = append(required, x.(string))
			}
		}
		ms := jsonMembers(typ)
		for name, m := range ms {
			at := path + "." + name
			p, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("%s: a member of %v, not in the JSON Schema", at, typ)
				continue
			}
			req := slices.Contains(required, name)
			if req == m.omitempty {
				t.Errorf("%s: omitempty %v in Go, required %v in the JSON Schema", at, m.omitempty, req)
			}
			s.compare(at, m.typ, doc, p)
		}
		for name := range props {
			if _, ok := ms[name]; !ok {
				t.Errorf("%s.%s: in the JSON Schema, not a member of %v", path, name, typ)
			}
		}
		for _, name := range required {
			if _, ok := ms[name]; !ok {
				t.Errorf("%s.%s: required in the JSON Schema, not a member of %v", path, name, typ)
			}
		}
	}
}

type jsonMember struct {
	typ       reflect.Type
	omitempty bool
}

// jsonMembers lists the JSON members of struct type t as encoding/json
// writes them (the record encoders write the same: schemas' golden files
// hold them to it).
func jsonMembers(t reflect.Type) map[string]jsonMember {
	out := map[string]jsonMember{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, m := range jsonMembers(f.Type) {
				out[n] = m
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonMember{typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}
