package readapi

import (
	"encoding/json"
	"testing"
)

// The pull cookie is outside input: parseCookie never panics, and a
// cookie it accepts is one encodeCookie writes, read back the same.
func FuzzParseCookie(f *testing.F) {
	for _, s := range []string{`null`, `0`, `17`, `{"order":40,"version":7}`, `"x"`, `-1`, `1.5`, `{"order":1}`, `{"order":1,"version":2}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, aerr := parseCookie(raw)
		if aerr != nil || c.null {
			return
		}
		if c.version > c.order {
			t.Fatalf("%s: version %d above order %d", raw, c.version, c.order)
		}
		b, err := json.Marshal(encodeCookie(c.order, c.version))
		if err != nil {
			t.Fatal(err)
		}
		back, aerr := parseCookie(b)
		if aerr != nil || back != c {
			t.Fatalf("%s → %+v → %s → %+v, %v", raw, c, b, back, aerr)
		}
	})
}
