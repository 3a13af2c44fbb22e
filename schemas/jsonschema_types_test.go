package schemas

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/canon-sync/canon/internal/schematest"
)

// The record types and their JSON Schema documents agree: the same
// members, the same required ones (those the Go type always writes),
// the same JSON types, at every depth and both ways.
func TestTypesMatchJSONSchema(t *testing.T) {
	docs := &schematest.Docs{Files: map[string]map[string]any{}, Describes: "the JSON Schema"}
	for _, name := range []string{"mutation.v1.json", "version.v1.json", "rejected.v1.json"} {
		b, err := jsonSchemas.ReadFile("jsonschema/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs.Files[name] = doc
	}
	docs.Compare(t, "mutation/v1", reflect.TypeFor[Mutation](), "mutation.v1.json", docs.Files["mutation.v1.json"])
	docs.Compare(t, "version/v1", reflect.TypeFor[Version](), "version.v1.json", docs.Files["version.v1.json"])
	docs.Compare(t, "rejected/v1", reflect.TypeFor[Rejected](), "rejected.v1.json", docs.Files["rejected.v1.json"])
}
