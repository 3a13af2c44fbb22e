package model

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"
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
	it := newObjectIter(canon, 0)
	for ks, ke, _, _, ok := it.next(); ok; ks, ke, _, _, ok = it.next() {
		want = append(want, canon[ks:ke])
	}
	if it.err != nil || len(want) != len(names) {
		t.Fatalf("walking %s: %d members, %v", canon, len(want), it.err)
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
		if end, err := valueEnd([]byte(tc.in), 0); err != nil || end != tc.end {
			t.Errorf("valueEnd(%s) = %d, %v, want %d", tc.in, end, err, tc.end)
		}
	}
	for _, bad := range []string{``, `"abc`, `{"a":1`, `[`, `,`} {
		if end, err := valueEnd([]byte(bad), 0); err == nil {
			t.Errorf("valueEnd(%s) = %d, want an error", bad, end)
		}
	}
}
