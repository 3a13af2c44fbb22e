package schemas

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var seeds = []string{
	``, ` `, `{}`, `[]`, ` { } `, `{"a":1}`, `{"a" : [1, 2.5e-3, -0, true, false, null, "x"]}`, `"\u00e9\ud800\n\"\\\/\b\f\r\t"`,
	`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `1E5`, `-0.0e-0`,
	`tru`, `truex`, `nul`, `"abc`, "\"\x01\"", "\"\x7f\xff\"", `"\x"`, `"\u12"`, `"\u12G4"`, `{"a":1}}`, `[[[]]]`, `[{"a":[{}]}]`,
	`{"a":1} {}`, `1 2`, "\t\n\r 1 \t\n\r", `{"a":"b"`, `[`, `]`, `}`, `,`, `:`, `{"a":1 "b":2}`, `{"a"::1}`, `"`, `"\`,
}

// FuzzCheck compares Check with json.Valid and json.Compact.
func FuzzCheck(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		valid, compact := CheckJSON(d)
		if valid != json.Valid(d) {
			t.Fatalf("CheckJSON(%q) valid = %v, json.Valid says %v", d, valid, !valid)
		}
		if !valid {
			return
		}
		var c bytes.Buffer
		if err := json.Compact(&c, d); err != nil {
			t.Fatal(err)
		}
		if compact != bytes.Equal(c.Bytes(), d) {
			t.Fatalf("CheckJSON(%q) compact = %v, json.Compact gives %q", d, compact, c.Bytes())
		}
		// Scalars read as encoding/json reads them.
		i := SkipJSONSpace(d, 0)
		val := d[i:]
		if e, _ := CheckJSONValue(d, i, 0); e >= 0 {
			val = d[i:e]
		}
		switch d[i] {
		case '"':
			s, ok := JSONString(val)
			var want string
			if err := json.Unmarshal(d, &want); !ok || err != nil || s != want {
				t.Fatalf("JSONString(%q) = %q, %v; encoding/json: %q, %v", d, s, ok, want, err)
			}
			for _, prev := range []string{"", want, string(val[1 : len(val)-1])} {
				if s, ok := JSONStringLike(val, prev); !ok || s != want {
					t.Fatalf("JSONStringLike(%q, %q) = %q, %v; encoding/json: %q", d, prev, s, ok, want)
				}
			}
		case '{', '[':
		default:
			if n, ok := JSONUint(val, 64); ok {
				var want uint64
				if err := json.Unmarshal(d, &want); err != nil || want != n {
					t.Fatalf("JSONUint(%q) = %d; encoding/json: %d, %v", d, n, want, err)
				}
			}
			if n, ok := JSONInt(val, 32); ok {
				var want int32
				if err := json.Unmarshal(d, &want); err != nil || int64(want) != n {
					t.Fatalf("JSONInt(%q) = %d; encoding/json: %d, %v", d, n, want, err)
				}
			}
		}
	})
}

// walk checks the value at d[at] with JSONMembers and JSONElements all the way
// down, as the decoders built on them do, and returns the index after it,
// or -1.
func walk(d []byte, at, depth int, elements *[][]byte) int {
	return walkWith(JSONMembers, d, at, depth, elements)
}

func walkWith(members func([]byte, int, int, func([]byte, int) int) (int, bool), d []byte, at, depth int, elements *[][]byte) int {
	if at >= len(d) {
		return -1
	}
	switch d[at] {
	case '{':
		end, ok := members(d, at, depth, func(_ []byte, at int) int { return walkWith(members, d, at, depth+1, nil) })
		if !ok {
			return -1
		}
		return end
	case '[':
		end, ok := JSONElements(d, at, depth, func(at int) int {
			end := walkWith(members, d, at, depth+1, nil)
			if elements != nil && end >= 0 {
				*elements = append(*elements, d[at:end])
			}
			return end
		})
		if !ok {
			return -1
		}
		return end
	}
	end, _ := CheckJSONValue(d, at, depth)
	return end
}

// FuzzWalk checks that JSONMembers and JSONElements accept exactly what
// json.Valid accepts (but keys with escapes, which they refuse), that
// with JSONMembersUnescaped they accept exactly that, and that they find
// the elements encoding/json finds.
func FuzzWalk(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		var elements [][]byte
		end := walk(d, SkipJSONSpace(d, 0), 0, &elements)
		walked := end >= 0 && SkipJSONSpace(d, end) == len(d)
		valid := json.Valid(d)
		if walked && !valid || !walked && valid && !bytes.Contains(d, []byte{'\\'}) {
			t.Fatalf("the walk of %q is %v, json.Valid says %v", d, walked, valid)
		}
		end = walkWith(JSONMembersUnescaped, d, SkipJSONSpace(d, 0), 0, nil)
		if unescaped := end >= 0 && SkipJSONSpace(d, end) == len(d); unescaped != valid {
			t.Fatalf("the walk of %q with JSONMembersUnescaped is %v, json.Valid says %v", d, unescaped, valid)
		}
		if !walked || d[SkipJSONSpace(d, 0)] != '[' {
			return
		}
		var want []json.RawMessage
		if err := json.Unmarshal(d, &want); err != nil || len(want) != len(elements) {
			t.Fatalf("%d elements in %q; encoding/json: %d, %v", len(elements), d, len(want), err)
		}
		for k := range want {
			if !bytes.Equal(want[k], elements[k]) {
				t.Fatalf("element %d of %q is %q, encoding/json's %q", k, d, elements[k], want[k])
			}
		}
	})
}

func TestCheckDepth(t *testing.T) {
	for _, n := range []int{maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closing := "]"
			if open != "[" {
				closing = "}"
			}
			d := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(closing, n))
			if got, want := valid(d), json.Valid(d); got != want {
				t.Errorf("%d times %s: Valid = %v, json.Valid = %v", n, open, got, want)
			}
			if end := walk(d, 0, 0, nil); (end == len(d)) != json.Valid(d) {
				t.Errorf("%d times %s: walk = %d of %d, json.Valid = %v", n, open, end, len(d), json.Valid(d))
			}
			d = []byte(strings.Repeat(open, n-1) + "[]" + strings.Repeat(closing, n-1))
			if got, want := valid(d), json.Valid(d); got != want {
				t.Errorf("%d times %s with [] inside: Valid = %v, json.Valid = %v", n, open, got, want)
			}
			if end := walk(d, 0, 0, nil); (end == len(d)) != json.Valid(d) {
				t.Errorf("%d times %s with [] inside: walk = %d of %d, json.Valid = %v", n, open, end, len(d), json.Valid(d))
			}
		}
	}
	if !json.Valid([]byte(strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth))) {
		t.Error("encoding/json's limit is no longer maxDepth")
	}
}

func valid(d []byte) bool {
	ok, _ := CheckJSON(d)
	return ok
}

func BenchmarkCheck(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"clientGroup":"g","mutations":[`)
	for i := range 100 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"client":"c","id":1,"name":"item.put","args":{"collection":"tasks","id":"t1","data":{"title":"a task with a title of some length","done":false,"n":12345}},"ts":1}`)
	}
	body.WriteString(`]}`)
	d := body.Bytes()
	b.Run("Check", func(b *testing.B) {
		b.SetBytes(int64(len(d)))
		for b.Loop() {
			CheckJSON(d)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(d)))
		for b.Loop() {
			json.Valid(d)
		}
	})
}

// FuzzAppendString compares AppendJSONString with encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "abc", "a\"b\\c", "<a&b>", "\x00\x1f\x7f", "é\u2028\u2029", "\xff\xfe", "tab\tnl\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("x"), s, true); string(got) != "x"+string(want) {
			t.Fatalf("AppendJSONString(%q, true) = %s, json.Marshal: %s", s, got[1:], want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got := AppendJSONString(nil, s, false); string(got)+"\n" != buf.String() {
			t.Fatalf("AppendJSONString(%q, false) = %s, an Encoder without HTML escaping: %s", s, got, buf.Bytes())
		}
	})
}
