package model_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// Each kind of error outcome carries its stable code beside the message
// (which names ids), and an applied mutation none.
func TestErrorCodes(t *testing.T) {
	reg := testRegistry(t)
	if err := reg.Register("test.quota", func(model.Tx, json.RawMessage) error {
		return model.WithCode("quota_exceeded", errors.New("project acme/p is over its quota"))
	}); err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("x", 2<<20) + `"`
	tests := []struct {
		branch, name, args string
		code               string // "" for applied
	}{
		{name: model.ItemPut, args: `{"collection":"tasks","id":"t1","data":{"title":"x"}}`},
		{name: model.ItemPatch, args: `{"collection":"tasks","id":"t9","data":{"done":true}}`, code: model.CodeNotFound},
		{name: model.ItemDelete, args: `{"collection":"tasks","id":"t9"}`, code: model.CodeNotFound},
		{name: model.ItemPut, args: `{"collection":"tasks","id":"t2"}`, code: model.CodeInvalidArgs},
		{name: model.ItemPut, args: `{"collection":"tasks","id":"t2","meta":[],"data":1}`, code: model.CodeInvalidArgs},
		{name: model.ItemPut, args: `{"collection":"tasks","id":"t2","data":` + big + `}`, code: model.CodeTooLarge},
		{name: model.ItemSplice, args: `{"collection":"tasks","id":"t1","path":"/title","index":99,"insert":"y"}`, code: model.CodeInvalidEdit},
		{name: model.ItemSplice, args: `{"collection":"tasks","id":"t1","path":"/nope","index":0,"insert":"y"}`, code: model.CodeInvalidEdit},
		{name: "no.such", args: `{}`, code: model.CodeUnknownMutator},
		{name: "test.fail", args: `"x"`, code: model.CodeMutator},
		{name: "test.panic", args: `"x"`, code: model.CodePanic},
		{name: "test.quota", args: `{}`, code: "quota_exceeded"},
		{name: model.ProjectSet, args: `[1]`, code: model.CodeInvalidArgs},
		{branch: "dev", name: model.BranchCreate, args: `{"from":"main"}`},
		{branch: "dev", name: model.BranchCreate, args: `{"from":"main"}`, code: model.CodeExists},
	}
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, reg, schemas.Limits{})
	ids := map[string]uint64{}
	for i, tc := range tests {
		ids[tc.branch]++
		d, err := dec.Decide(model.MutationRecord{
			Mutation: &schemas.Mutation{Org: testOrg, Project: testProject, Branch: tc.branch, ClientGroup: "g", Client: "c",
				ID: ids[tc.branch], Name: tc.name, Args: json.RawMessage(tc.args)},
			Timestamp: testEpoch.Add(time.Duration(i) * time.Second), Partition: 1, Offset: int64(i),
		})
		if err != nil {
			t.Fatal(err)
		}
		if d.Version == nil {
			t.Fatalf("%d %s %s: no version (%v)", i, tc.name, tc.args[:min(len(tc.args), 60)], d.Kind)
		}
		o := d.Version.Mutations[0]
		if o.Code != tc.code {
			t.Errorf("%d %s %.60s: code %q (error %q), want %q", i, tc.name, tc.args, o.Code, o.Error, tc.code)
		}
		if _, err := schemas.EncodeVersion(d.Version, schemas.Limits{}); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
}
