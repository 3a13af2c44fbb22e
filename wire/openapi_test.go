package wire

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// described are the wire types that docs/openapi.yaml describes, with the
// name of their schema there.
var described = []struct {
	schema string
	value  any
}{
	{"PushRequest", PushRequest{}},
	{"PushMutation", PushMutation{}},
	{"PushResponse", PushResponse{}},
	{"Written", Written{}},
	{"PushOutcome", Outcome{}},
	{"Error", ErrorAnswer{}},
	{"WebsocketHello", HelloMessage{}},
	{"WebsocketVersion", VersionMessage{}},
	{"WebsocketItem", ItemMessage{}},
	{"WebsocketMutation", MutationMessage{}},
	{"WebsocketReset", ResetMessage{}},
	{"WebsocketRejected", RejectedMessage{}},
	{"WebsocketPush", PushMessage{}},
	{"WebsocketPushed", PushedMessage{}},
	{"WebsocketError", ErrorMessage{}},
	{"WebsocketPing", PingMessage{}},
	{"WebsocketPong", PongMessage{}},
}

// optionalInput are members that a Go type always writes but a reader
// does not require, by "GoType.member": what they mean when absent.
var optionalInput = map[string]string{
	"PushMutation.args": "absent args are null",
}

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// The wire types and docs/openapi.yaml's schemas of them agree: the same
// members, the same required ones (those a Go type always writes), the
// same JSON types, at every depth, both ways.
func TestTypesMatchOpenAPI(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, d := range described {
		ref := doc.Components.Schemas[d.schema]
		if ref == nil {
			t.Errorf("docs/openapi.yaml has no schema %s for wire.%T", d.schema, d.value)
			continue
		}
		compareSchema(t, d.schema, reflect.TypeOf(d.value), ref)
	}
	// Every Websocket* schema describes a wire type.
	for name := range doc.Components.Schemas {
		if strings.HasPrefix(name, "Websocket") && !slices.ContainsFunc(described, func(d struct {
			schema string
			value  any
		}) bool {
			return d.schema == name
		}) {
			t.Errorf("docs/openapi.yaml's %s describes no wire type (add it to described)", name)
		}
	}
}

// member is a JSON member of a Go struct.
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

var rawMessage = reflect.TypeFor[json.RawMessage]()

// compareSchema reports where Go type typ and the schema at path differ.
func compareSchema(t *testing.T, path string, typ reflect.Type, ref *openapi3.SchemaRef) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	s := ref.Value
	if typ == rawMessage {
		anyJSON := strings.HasSuffix(ref.Ref, "/JSON") || len(s.AllOf) == 1 && strings.HasSuffix(s.AllOf[0].Ref, "/JSON")
		if !anyJSON {
			t.Errorf("%s: any JSON (json.RawMessage) in Go, %v in docs/openapi.yaml: use $ref JSON", path, s.Type)
		}
		return
	}
	want := ""
	switch typ.Kind() {
	case reflect.String:
		want = openapi3.TypeString
	case reflect.Bool:
		want = openapi3.TypeBoolean
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = openapi3.TypeInteger
	case reflect.Float32, reflect.Float64:
		want = openapi3.TypeNumber
	case reflect.Slice, reflect.Array:
		want = openapi3.TypeArray
	case reflect.Map, reflect.Struct:
		want = openapi3.TypeObject
	default:
		t.Errorf("%s: Go type %v has no JSON type", path, typ)
		return
	}
	if !s.Type.Is(want) {
		t.Errorf("%s: %s in Go (%v), %v in docs/openapi.yaml", path, want, typ, s.Type.Slice())
		return
	}
	switch typ.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Items == nil {
			t.Errorf("%s: an array without items in docs/openapi.yaml", path)
			return
		}
		compareSchema(t, path+"[]", typ.Elem(), s.Items)
	case reflect.Map:
		if s.AdditionalProperties.Schema == nil {
			t.Errorf("%s: a map in Go, an object without additionalProperties in docs/openapi.yaml", path)
			return
		}
		compareSchema(t, path+"{}", typ.Elem(), s.AdditionalProperties.Schema)
	case reflect.Struct:
		ms := members(typ)
		for name, m := range ms {
			at := path + "." + name
			p := s.Properties[name]
			if p == nil {
				t.Errorf("%s: a member of %v, not in docs/openapi.yaml", at, typ)
				continue
			}
			required := slices.Contains(s.Required, name)
			if _, ok := optionalInput[typ.Name()+"."+name]; !ok && required == m.omitempty {
				t.Errorf("%s: omitempty %v in Go, required %v in docs/openapi.yaml", at, m.omitempty, required)
			}
			compareSchema(t, at, m.typ, p)
		}
		for name := range s.Properties {
			if _, ok := ms[name]; !ok {
				t.Errorf("%s.%s: in docs/openapi.yaml, not a member of %v", path, name, typ)
			}
		}
		for _, name := range s.Required {
			if _, ok := ms[name]; !ok {
				t.Errorf("%s.%s: required in docs/openapi.yaml, not a member of %v", path, name, typ)
			}
		}
	}
}

// codes returns the values of the Code constants of errors.go, by the
// first line of their block's doc comment.
func codes(t *testing.T) map[string][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || g.Doc == nil {
			continue
		}
		block, _, _ := strings.Cut(g.Doc.Text(), "\n")
		for _, spec := range g.Specs {
			for i, name := range spec.(*ast.ValueSpec).Names {
				if !strings.HasPrefix(name.Name, "Code") {
					continue
				}
				v, err := strconv.Unquote(spec.(*ast.ValueSpec).Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				out[block] = append(out[block], v)
			}
		}
	}
	return out
}

// The error codes are one list: no code is declared twice, and
// docs/openapi.yaml's error answer lists exactly the HTTP APIs' codes.
func TestCodesMatchOpenAPI(t *testing.T) {
	byBlock := codes(t)
	var http, all []string
	for block, cs := range byBlock {
		all = append(all, cs...)
		if strings.Contains(block, "HTTP APIs") {
			http = cs
		}
	}
	if len(http) == 0 || len(byBlock) != 2 {
		t.Fatalf("error codes by block: %v", byBlock)
	}
	slices.Sort(all)
	if c := slices.Compact(slices.Clone(all)); len(c) != len(all) {
		t.Errorf("a code is declared twice: %v", all)
	}
	doc := loadOpenAPI(t)
	var inDoc []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Properties["code"].Value.Enum {
		inDoc = append(inDoc, v.(string))
	}
	slices.Sort(http)
	slices.Sort(inDoc)
	if !slices.Equal(http, inDoc) {
		t.Errorf("wire's HTTP error codes are\n  %v\ndocs/openapi.yaml's Error lists\n  %v", http, inDoc)
	}
}
