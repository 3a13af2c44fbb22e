package jsonfast

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
		valid, compact := Check(d)
		if valid != json.Valid(d) {
			t.Fatalf("Check(%q) valid = %v, json.Valid says %v", d, valid, !valid)
		}
		if !valid {
			return
		}
		var c bytes.Buffer
		if err := json.Compact(&c, d); err != nil {
			t.Fatal(err)
		}
		if compact != bytes.Equal(c.Bytes(), d) {
			t.Fatalf("Check(%q) compact = %v, json.Compact gives %q", d, compact, c.Bytes())
		}
		// The walkers find the same members and elements as encoding/json.
		i := SkipSpace(d, 0)
		var got []json.RawMessage
		switch d[i] {
		case '{':
			var want map[string]json.RawMessage
			_, ok := Object(d, i, func(key, val []byte) bool {
				got = append(got, val)
				return json.Valid(val) && json.Valid(append(append([]byte{'"'}, key...), '"'))
			})
			if ok && json.Unmarshal(d, &want) != nil {
				t.Fatalf("Object walked %q, which does not decode", d)
			}
		case '[':
			var want []json.RawMessage
			_, ok := Array(d, i, func(val []byte) bool { got = append(got, val); return true })
			if err := json.Unmarshal(d, &want); err != nil || !ok || len(want) != len(got) {
				t.Fatalf("Array(%q) = %d elements, %v; encoding/json: %d, %v", d, len(got), ok, len(want), err)
			}
			for k := range want {
				var w bytes.Buffer
				_ = json.Compact(&w, want[k])
				var g bytes.Buffer
				_ = json.Compact(&g, got[k])
				if !bytes.Equal(w.Bytes(), g.Bytes()) {
					t.Fatalf("Array(%q) element %d is %q, encoding/json's %q", d, k, got[k], want[k])
				}
			}
		case '"':
			s, ok := String(d[i:EndValue(d, i)])
			var want string
			if err := json.Unmarshal(d, &want); !ok || err != nil || s != want {
				t.Fatalf("String(%q) = %q, %v; encoding/json: %q, %v", d, s, ok, want, err)
			}
		default:
			val := d[i:EndValue(d, i)]
			if n, ok := Uint(val, 64); ok {
				var want uint64
				if err := json.Unmarshal(d, &want); err != nil || want != n {
					t.Fatalf("Uint(%q) = %d; encoding/json: %d, %v", d, n, want, err)
				}
			}
			if n, ok := Int(val, 32); ok {
				var want int32
				if err := json.Unmarshal(d, &want); err != nil || int64(want) != n {
					t.Fatalf("Int(%q) = %d; encoding/json: %d, %v", d, n, want, err)
				}
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
			if got, want := Valid(d), json.Valid(d); got != want {
				t.Errorf("%d times %s: Valid = %v, json.Valid = %v", n, open, got, want)
			}
			d = []byte(strings.Repeat(open, n-1) + "[]" + strings.Repeat(closing, n-1))
			if got, want := Valid(d), json.Valid(d); got != want {
				t.Errorf("%d times %s with [] inside: Valid = %v, json.Valid = %v", n, open, got, want)
			}
		}
	}
	if !json.Valid([]byte(strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth))) {
		t.Error("encoding/json's limit is no longer maxDepth")
	}
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
			Check(d)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(d)))
		for b.Loop() {
			json.Valid(d)
		}
	})
}

// FuzzAppendString compares AppendString with encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "abc", "a\"b\\c", "<a&b>", "\x00\x1f\x7f", "é\u2028\u2029", "\xff\xfe", "tab\tnl\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s, true); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q, true) = %s, json.Marshal: %s", s, got[1:], want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if got := AppendString(nil, s, false); string(got)+"\n" != buf.String() {
			t.Fatalf("AppendString(%q, false) = %s, an Encoder without HTML escaping: %s", s, got, buf.Bytes())
		}
	})
}
