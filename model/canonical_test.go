package model

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{` { "b" : 1, "a" : [ true , null ] } `, `{"a":[true,null],"b":1}`},
		{`1.0e2`, `100`},
		{`-0`, `0`},
		{`1E-7`, `1e-7`},
		{`"\u00e9\u003c\/"`, `"é</"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`{"é":1,"z":2,"a":3}`, `{"a":3,"z":2,"é":1}`},
		// RFC 8785 sorts by UTF-16 code units: U+FB01 sorts after U+1F600.
		{`{"\ufb01":1,"😀":2}`, `{"😀":2,"ﬁ":1}`},
	} {
		got, err := Canonical(json.RawMessage(tc.in))
		if err != nil {
			t.Errorf("Canonical(%s): %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,}`, `{"a":1,"a":2}`, `"\ud800"`, `NaN`, "\"\xff\""} {
		if got, err := Canonical(json.RawMessage(bad)); err == nil {
			t.Errorf("Canonical(%q) = %s, want an error", bad, got)
		}
	}
}

func TestBodyHash(t *testing.T) {
	// sha256("{}")
	if got, want := BodyHash([]byte("{}")), "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"; got != want {
		t.Errorf("BodyHash({}) = %s, want %s", got, want)
	}
}

// scalarsSize must be the length of the canonical JSON it stands for.
func TestScalarsSize(t *testing.T) {
	for _, sc := range []map[string]json.RawMessage{
		nil,
		{},
		{"a": json.RawMessage(`1`)},
		{"name": json.RawMessage(`"Roadmap"`), "done": json.RawMessage(`true`), "x_1": json.RawMessage(`{"a":[1,2]}`)},
	} {
		raw, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) == "null" {
			raw = []byte("{}")
		}
		canon, err := Canonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := scalarsSize(sc); got != len(canon) {
			t.Errorf("scalarsSize(%s) = %d, want %d", canon, got, len(canon))
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 6, "abc…"},
		{"ééééé", 6, "é…"}, // never half a rune
	} {
		got := truncate(tc.s, tc.n)
		if got != tc.want || len(got) > tc.n {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	if s := fmt.Sprint(truncate(string(make([]byte, 5000)), MaxErrorBytes)); len(s) > MaxErrorBytes {
		t.Errorf("truncate to %d gave %d bytes", MaxErrorBytes, len(s))
	}
}
