package model

import (
	"encoding/json"
	"testing"
)

// refMergePatch is RFC 7396 on decoded values, canonicalized with jcs: the
// obviously-correct reference for mergePatch.
func refMergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	var merge func(target, patch any) any
	merge = func(target, patch any) any {
		pm, ok := patch.(map[string]any)
		if !ok {
			return patch
		}
		tm, ok := target.(map[string]any)
		if !ok {
			tm = map[string]any{}
		}
		for k, v := range pm {
			if v == nil {
				delete(tm, k)
			} else {
				tm[k] = merge(tm[k], v)
			}
		}
		return tm
	}
	out, err := json.Marshal(merge(d, p))
	if err != nil {
		return nil, err
	}
	return Canonical(out)
}

func mustCanonical(t testing.TB, s string) []byte {
	t.Helper()
	c, err := Canonical(json.RawMessage(s))
	if err != nil {
		t.Fatalf("Canonical(%s): %v", s, err)
	}
	return c
}

var mergeCases = []struct{ doc, patch, want string }{
	// RFC 7396 Appendix A.
	{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
	{`{"a":"b"}`, `{"a":null}`, `{}`},
	{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
	{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
	{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
	{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
	{`["a","b"]`, `["c","d"]`, `["c","d"]`},
	{`{"a":"b"}`, `["c"]`, `["c"]`},
	{`{"a":"foo"}`, `null`, `null`},
	{`{"a":"foo"}`, `"bar"`, `"bar"`},
	{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
	{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
	{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
	// A null target merges into {} (json-patch refuses it).
	{`null`, `{"a":1}`, `{"a":1}`},
	// An array in the patch is copied as is, nulls inside included
	// (json-patch drops them when the target lacks the member).
	{`{}`, `{"a":[{"b":null}]}`, `{"a":[{"b":null}]}`},
	{`{"a":{}}`, `{"a":[{"b":null}]}`, `{"a":[{"b":null}]}`},
	// Members interleave in canonical (UTF-16) order.
	{`{ "z" : 1 , "a" : 2, "\ufb01": 3 }`, `{"m":1.0e1,"😀":{"x":null,"y":"\u0001"},"ｚ":null}`, `{"a":2,"m":10,"z":1,"😀":{"y":"\u0001"},"ﬁ":3}`},
	{`{"a":{"b":{"c":1,"d":[1,{"e":2}]}},"f":"x"}`, `{"a":{"b":{"c":null,"g":true}},"f":{"h":null}}`, `{"a":{"b":{"d":[1,{"e":2}],"g":true}},"f":{}}`},
}

func TestMergePatch(t *testing.T) {
	for _, tc := range mergeCases {
		doc, patch := mustCanonical(t, tc.doc), mustCanonical(t, tc.patch)
		got, err := mergePatch(doc, patch)
		if err != nil {
			t.Errorf("mergePatch(%s, %s): %v", tc.doc, tc.patch, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("mergePatch(%s, %s) = %s, want %s", tc.doc, tc.patch, got, tc.want)
		}
		if ref, err := refMergePatch(doc, patch); err != nil || string(ref) != tc.want {
			t.Errorf("the reference merges %s and %s into %s, %v", tc.doc, tc.patch, ref, err)
		}
	}
	for _, bad := range [][2]string{{`{"a":1`, `{"b":1}`}, {`{"a":1}`, `{"b"}`}, {``, `{}`}} {
		if got, err := mergePatch([]byte(bad[0]), []byte(bad[1])); err == nil {
			t.Errorf("mergePatch(%s, %s) = %s, want an error", bad[0], bad[1], got)
		}
	}
}

// FuzzMergePatch checks mergePatch against the reference on canonical
// inputs.
func FuzzMergePatch(f *testing.F) {
	for _, tc := range mergeCases {
		f.Add(tc.doc, tc.patch)
	}
	f.Fuzz(func(t *testing.T, doc, patch string) {
		d, err := Canonical(json.RawMessage(doc))
		if err != nil {
			return
		}
		p, err := Canonical(json.RawMessage(patch))
		if err != nil {
			return
		}
		want, err := refMergePatch(d, p)
		if err != nil {
			return // beyond encoding/json (numbers out of range …)
		}
		got, err := mergePatch(d, p)
		if err != nil || string(got) != string(want) {
			t.Errorf("mergePatch(%s, %s) = %s, %v; the reference gives %s", d, p, got, err, want)
		}
	})
}
