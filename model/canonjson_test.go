package model

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/canon-sync/canon/schemas"
	"github.com/gowebpki/jcs"
)

var stringCases = []string{"", "plain", "quote\" backslash\\ slash/", "\b\f\n\r\t\x00\x01\x1f\x7f", "é😀ﬁ\u2028", "<&>"}

// appendString writes what jcs writes, and decodeString reads it back.
func TestAppendString(t *testing.T) {
	for _, s := range stringCases {
		checkString(t, s)
	}
}

func checkString(t *testing.T, s string) {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := mustCanonical(t, string(raw))
	got := appendString(nil, s)
	if string(got) != string(want) {
		t.Errorf("appendString(%q) = %s, jcs gives %s", s, got, want)
	}
	if back := decodeString(got); back != s {
		t.Errorf("decodeString(%s) = %q, want %q", got, back, s)
	}
	// Escapes jcs does not write still decode.
	if back := decodeString(raw); back != s {
		t.Errorf("decodeString(%s) = %q, want %q", raw, back, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		checkString(t, s)
	})
}

// compareNames sorts as jcs sorts member names.
func TestCompareNames(t *testing.T) {
	names := []string{"", "a", "ab", "b", "B", "é", "ﬁ", "😀", "😁", "\uffff", "\ue000", "a\"", "a\\", "a\n", "a\u0001", "\u00ff", "z"}
	obj := map[string]int{}
	for i, n := range names {
		obj[n] = i
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	canon := mustCanonical(t, string(raw))
	var want [][]byte
	_, ok := schemas.JSONMemberSpans(canon, 0, 0, func(ks, ke, vs int) int {
		want = append(want, canon[ks:ke])
		ve, _ := schemas.CheckJSONValue(canon, vs, 1)
		return ve
	})
	if !ok || len(want) != len(names) {
		t.Fatalf("walking %s: %d members, %v", canon, len(want), ok)
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, compareNames)
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("compareNames sorts %q, jcs %q", got, want)
		}
	}
	for i := 1; i < len(want); i++ {
		if compareNames(want[i-1], want[i]) >= 0 || compareNames(want[i], want[i]) != 0 {
			t.Errorf("compareNames(%s, %s)", want[i-1], want[i])
		}
	}
}

func TestValueEnd(t *testing.T) {
	for _, tc := range []struct {
		in  string
		end int
	}{
		{`"a\"b",`, 6},
		{`{"a":["}",{"b":"]"}]}x`, 21},
		{`-1.5e-7]`, 7},
		{`true}`, 4},
		{`[]`, 2},
	} {
		if end, err := valueEnd([]byte(tc.in), 0, 0); err != nil || end != tc.end {
			t.Errorf("valueEnd(%s) = %d, %v, want %d", tc.in, end, err, tc.end)
		}
	}
	for _, bad := range []string{``, `"abc`, `{"a":1`, `[`, `,`} {
		if end, err := valueEnd([]byte(bad), 0, 0); err == nil {
			t.Errorf("valueEnd(%s) = %d, want an error", bad, end)
		}
	}
}

var canonicalCases = []struct {
	in    string
	quick bool // isCanonical recognizes it
}{
	{`{}`, true},
	{`[]`, true},
	{`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, true},
	{`{"b":1,"a":2}`, false},                  // order
	{`{"a":1,"a":2}`, false},                  // duplicate
	{`{"a": 1}`, false},                       // whitespace
	{` {"a":1}`, false},                       // whitespace
	{`"\u001f\n\t\"\\é😀"`, true},              // the escapes jcs writes
	{`"\u001F"`, false},                       // upper-case hex
	{`"\u0008"`, false},                       // \b has a short form
	{`"\u0041"`, false},                       // A needs no escape
	{`"\/"`, false},                           // nor does /
	{"\"\x01\"", false},                       // a raw control character: invalid
	{"\"\xff\"", false},                       // invalid UTF-8
	{"\"\xed\xa0\x80\"", false},               // a surrogate in UTF-8
	{`0`, true},                               // numbers
	{`-0`, false},                             // jcs writes 0
	{`-12`, true},                             //
	{`123456789012345`, true},                 //
	{`1234567890123456`, false},               // beyond 15 digits: through a double
	{`1.5`, false},                            // fractions and exponents: jcs decides
	{`1e2`, false},                            //
	{`01`, false},                             //
	{`[1,2,]`, false},                         //
	{`{"a":1}x`, false},                       //
	{`{"\u00e9":1,"z":2}`, false},             // é need not be escaped
	{`{"z":1,"é":2,"😀":3,"\uffff":4}`, false}, // order by UTF-16: 😀 before U+FFFF
	{`{"z":1,"é":2,"😀":3,"` + "\uffff" + `":4}`, true},
	{`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`, false}, // deeper than maxQuickDepth
}

// isCanonical accepts only text that jcs leaves as it is.
func TestIsCanonical(t *testing.T) {
	for _, tc := range canonicalCases {
		if got := isCanonical([]byte(tc.in)); got != tc.quick {
			t.Errorf("isCanonical(%s) = %v, want %v", tc.in, got, tc.quick)
		}
		checkCanonical(t, []byte(tc.in))
	}
}

// checkCanonical checks isCanonical and Canonical against jcs.
func checkCanonical(t *testing.T, in []byte) {
	t.Helper()
	want, werr := jcs.Transform(in)
	if isCanonical(in) && (werr != nil || string(want) != string(in)) {
		t.Errorf("isCanonical(%q), but jcs gives %q, %v", in, want, werr)
	}
	got, err := Canonical(in)
	if (err == nil) != (werr == nil) || err == nil && string(got) != string(want) {
		t.Errorf("Canonical(%q) = %q, %v; jcs %q, %v", in, got, err, want, werr)
	}
}

func FuzzCanonical(f *testing.F) {
	for _, tc := range canonicalCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		checkCanonical(t, in)
	})
}

// BenchmarkAppendString writes a 100 KiB text of prose: mostly ASCII, a
// line break and a quote now and then, some accented letters.
func BenchmarkAppendString(b *testing.B) {
	const line = "Le cœur a ses raisons que la raison ne connaît point: \"Pascal\", Pensées.\n"
	var text []byte
	for len(text) < 100<<10 {
		text = append(text, line...)
	}
	s := string(text)
	buf := make([]byte, 0, 2*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = appendString(buf[:0], s)
	}
}
