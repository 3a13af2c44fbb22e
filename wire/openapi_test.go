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

	"github.com/canon-sync/canon/internal/schematest"
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
	{"DeployResponse", DeployResponse{}},
	{"DeployedRecord", DeployedRecord{}},
	{"ActiveBundle", ActiveBundle{}},
	{"Deployments", Deployments{}},
	{"Deployment", Deployment{}},
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

// openAPIDocs is doc as plain JSON for schematest: it keeps each $ref.
// A json.RawMessage member must be described as any JSON: $ref JSON.
func openAPIDocs(t *testing.T, doc *openapi3.T) *schematest.Docs {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var plain map[string]any
	if err := json.Unmarshal(b, &plain); err != nil {
		t.Fatal(err)
	}
	return &schematest.Docs{Files: map[string]map[string]any{"": plain}, Describes: "docs/openapi.yaml",
		Optional: optionalInput, RawJSON: func(node map[string]any) bool {
			if ref, ok := node["$ref"].(string); ok {
				return strings.HasSuffix(ref, "/JSON")
			}
			all, _ := node["allOf"].([]any)
			if len(all) != 1 {
				return false
			}
			ref, _ := all[0].(map[string]any)["$ref"].(string)
			return strings.HasSuffix(ref, "/JSON")
		}}
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
	docs := openAPIDocs(t, doc)
	schemas := docs.Files[""]["components"].(map[string]any)["schemas"].(map[string]any)
	for _, d := range described {
		ref, _ := schemas[d.schema].(map[string]any)
		if ref == nil {
			t.Errorf("docs/openapi.yaml has no schema %s for wire.%T", d.schema, d.value)
			continue
		}
		docs.Compare(t, d.schema, reflect.TypeOf(d.value), "", ref)
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
