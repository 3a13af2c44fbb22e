package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestSpliceUTF16(t *testing.T) {
	for _, tc := range []struct {
		s          string
		index, del int64
		ins, want  string
		err        string
	}{
		{s: "Hello", index: 5, ins: " world", want: "Hello world"},
		{s: "Hello", index: 0, del: 1, ins: "J", want: "Jello"},
		{s: "Hello", index: 1, del: 4, want: "H"},
		{s: "", index: 0, ins: "a", want: "a"},
		{s: "é", index: 1, ins: "!", want: "é!"},     // é is one code unit
		{s: "a😀b", index: 3, ins: "c", want: "a😀cb"}, // 😀 is two
		{s: "a😀b", index: 1, del: 2, want: "ab"},     // deleting the whole pair
		{s: "ab", index: 1, ins: "😀", want: "a😀b"},   // inserting a pair
		{s: "a😀b", index: 4, want: "a😀b"},            // a no-op at the end
		{s: "a😀b", index: 2, err: "inside a surrogate pair"},
		{s: "a😀b", index: 1, del: 1, err: "inside a surrogate pair"},
		{s: "abc", index: 4, err: "out of range: the string is 3"},
		{s: "abc", index: 2, del: 2, err: "runs past the end"},
		{s: "abc", index: 1, del: 1 << 62, err: "runs past the end"},
		{s: "abc", index: -1, err: "negative"},
	} {
		got, err := spliceUTF16(tc.s, tc.index, tc.del, tc.ins)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("spliceUTF16(%q, %d, %d, %q): error %v, want one with %q", tc.s, tc.index, tc.del, tc.ins, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("spliceUTF16(%q, %d, %d, %q) = %q, %v, want %q", tc.s, tc.index, tc.del, tc.ins, got, err, tc.want)
		}
	}
}

func TestParsePointer(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want []string
		err  bool
	}{
		{p: "", want: nil},
		{p: "/", want: []string{""}},
		{p: "/a/0", want: []string{"a", "0"}},
		{p: "/a~1b/~0c/~01", want: []string{"a/b", "~c", "~1"}},
		{p: "a", err: true},
		{p: "/a~2", err: true},
		{p: "/a~", err: true},
	} {
		got, err := parsePointer(tc.p)
		if (err != nil) != tc.err || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("parsePointer(%q) = %q, %v", tc.p, got, err)
		}
	}
}

func TestSpliceJSON(t *testing.T) {
	doc := mustCanonical(t, `{"a":{"b":["x","yz"]},"n":1,"":"empty key","q\"/":"esc\n"}`)
	for _, tc := range []struct {
		path, want, err string
	}{
		{path: "/a/b/1", want: `{"":"empty key","a":{"b":["x","y!z"]},"n":1,"q\"/":"esc\n"}`},
		{path: "/", want: `{"":"e!mpty key","a":{"b":["x","yz"]},"n":1,"q\"/":"esc\n"}`},
		{path: "/q\"~1", want: `{"":"empty key","a":{"b":["x","yz"]},"n":1,"q\"/":"e!sc\n"}`},
		{path: "/a/b/01", err: "not an index"},
		{path: "/a/b/2", err: "not an index"},
		{path: "/a/b/-", err: "not an index"},
		{path: "/n", err: "a number, not a string"},
		{path: "/n/x", err: "cannot go into a number"},
		{path: "/a/c", err: `no member "c"`},
		{path: "", err: "an object, not a string"},
	} {
		got, err := spliceJSON(doc, tc.path, 1, 0, "!")
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("splice at %q: error %v, want one with %q", tc.path, err, tc.err)
		case tc.err == "" && (err != nil || string(got) != tc.want):
			t.Errorf("splice at %q = %s, %v, want %s", tc.path, got, err, tc.want)
		}
	}
}

// refSpliceJSON is spliceJSON on decoded values, canonicalized with jcs:
// the obviously-correct reference.
func refSpliceJSON(doc []byte, pointer string, index, del int64, insert string) ([]byte, error) {
	tokens, err := parsePointer(pointer)
	if err != nil {
		return nil, err
	}
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	set := func(v any) { root = v }
	cur := root
	for _, tok := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, errors.New("no member")
			}
			set, cur = func(v any) { c[tok] = v }, v
		case []any:
			n, ok := arrayIndex(tok)
			if !ok || n >= len(c) {
				return nil, errors.New("not an index")
			}
			set, cur = func(v any) { c[n] = v }, c[n]
		default:
			return nil, errors.New("cannot go into")
		}
	}
	s, ok := cur.(string)
	if !ok {
		return nil, errors.New("not a string")
	}
	spliced, err := spliceUTF16(s, index, del, insert)
	if err != nil {
		return nil, err
	}
	set(spliced)
	out, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return Canonical(out)
}

// FuzzSpliceJSON checks spliceJSON against the reference.
func FuzzSpliceJSON(f *testing.F) {
	f.Add(`{"a":{"b":["x","yz"]},"n":1}`, "/a/b/1", int64(1), int64(0), "!")
	f.Add(`"a😀b"`, "", int64(3), int64(1), "é")
	f.Add(`{"a/b":{"~c":"tilde"},"\u00e9":["\u0000"]}`, "/\u00e9/0", int64(0), int64(1), "\n")
	f.Fuzz(func(t *testing.T, doc, pointer string, index, del int64, insert string) {
		d, err := Canonical(json.RawMessage(doc))
		if err != nil || !utf8.ValidString(insert) || !utf8.ValidString(pointer) {
			return
		}
		want, werr := refSpliceJSON(d, pointer, index, del, insert)
		got, gerr := spliceJSON(d, pointer, index, del, insert)
		if (werr == nil) != (gerr == nil) || string(got) != string(want) {
			t.Errorf("spliceJSON(%s, %q, %d, %d, %q) = %s, %v; the reference gives %s, %v", d, pointer, index, del, insert, got, gerr, want, werr)
		}
	})
}

// TestSpliceJSONInPlaceMatchesDecoded checks the in-place splice against
// the decoded one at every index and length of a string with escapes,
// multi-byte characters and surrogate pairs, errors included.
//
// The string is the whole document, then a member and an element followed
// by other strings, where the splice does not look for the string's end.
func TestSpliceJSONInPlaceMatchesDecoded(t *testing.T) {
	text := "a\"b\\c\n\u0001é🎉日\t"
	str := appendString(nil, text)
	n := int64(len(utf16.Encode([]rune(text))))
	for _, w := range []struct{ before, pointer, after, where string }{
		{"", "", "", "data"},
		{`{"s":`, "/s", `,"t":"x\"y"}`, `data at path "/s"`},
		{`["z",`, "/1", `,"\"",""]`, `data at path "/1"`},
	} {
		doc := []byte(w.before + string(str) + w.after)
		start, end := len(w.before), len(w.before)+len(str)
		for index := int64(-1); index <= n+1; index++ {
			for del := int64(-1); del <= n+1-max(index, 0); del++ {
				for _, ins := range []string{"", "x", "\"\n", "🎉", "\x01"} {
					got, gerr := spliceJSON(doc, w.pointer, index, del, ins)
					want, werr := spliceDecoded(doc, start, end, index, del, ins, w.where)
					if string(got) != string(want) || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
						t.Fatalf("splice(%s at %q, %d, %d, %q) = %s, %v; decoded: %s, %v", doc, w.pointer, index, del, ins, got, gerr, want, werr)
					}
				}
			}
		}
	}
}

// spliceUTF16 walks the text; spliceUTF16Converted converts it to UTF-16
// and back, the plain reading of the definition. They must agree on every
// splice, errors included.
func FuzzSpliceUTF16MatchesConversion(f *testing.F) {
	for _, s := range []string{"", "hello", "h€llo", "a🎉b🎉c", "🎉", "x\u2028y", "\xff\xfe bad"} {
		f.Add(s, int64(1), int64(1), "é🎉")
	}
	f.Fuzz(func(t *testing.T, s string, index, del int64, ins string) {
		index, del = index%40, del%40
		got, gerr := spliceUTF16(s, index, del, ins)
		want, werr := spliceUTF16Converted(s, index, del, ins)
		if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("splice(%q, %d, %d, %q) = %q, %v; the conversion gives %q, %v", s, index, del, ins, got, gerr, want, werr)
		}
	})
}

func TestSpliceUTF16MatchesConversion(t *testing.T) {
	texts := []string{"", "a", "hello world", "h€llo wörld", "a🎉b🎉c🎉", "🎉🎉", "日本語のテキスト", "mixed 🎉 ü 日 \u2028"}
	for _, s := range texts {
		n := int64(len(utf16.Encode([]rune(s))))
		for index := int64(-1); index <= n+2; index++ {
			for del := int64(-1); del <= n+2-max(index, 0); del++ {
				for _, ins := range []string{"", "x", "🎉"} {
					got, gerr := spliceUTF16(s, index, del, ins)
					want, werr := spliceUTF16Converted(s, index, del, ins)
					if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
						t.Fatalf("splice(%q, %d, %d, %q) = %q, %v; the conversion gives %q, %v", s, index, del, ins, got, gerr, want, werr)
					}
				}
			}
		}
	}
}

func BenchmarkSpliceUTF16LargeText(b *testing.B) {
	s := strings.Repeat("lorem ipsum dolor sit amet, é 🎉 ", 10_000) // ~330 KB
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			if _, err := spliceUTF16(s, 150_000, 5, "edit"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("convert", func(b *testing.B) {
		for b.Loop() {
			if _, err := spliceUTF16Converted(s, 150_000, 5, "edit"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSpliceJSONLargeBody splices a few characters into the middle
// of a 330 KB string member, as the mix's large splices do: "inplace" is
// spliceJSON (the text edited as it is written), "decode" the string
// decoded, spliced and encoded again (what spliceJSON did before, and
// still does for text it does not walk).
func BenchmarkSpliceJSONLargeBody(b *testing.B) {
	text := strings.Repeat("lorem ipsum \"dolor\" sit amet,\n é 🎉 ", 10_000)
	doc, err := Canonical(json.RawMessage(`{"body":` + string(appendString(nil, text)) + `}`))
	if err != nil {
		b.Fatal(err)
	}
	start, end := len(`{"body":`), len(doc)-1
	want, err := spliceDecoded(doc, start, end, 150_000, 5, "edit", "data")
	if err != nil {
		b.Fatal(err)
	}
	if got, err := spliceJSON(doc, "/body", 150_000, 5, "edit"); err != nil || string(got) != string(want) {
		b.Fatalf("the in-place splice differs from the decoded one (%v)", err)
	}
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := spliceDecoded(doc, start, end, 150_000, 5, "edit", "data"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inplace", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			got, err := spliceJSON(doc, "/body", 150_000, 5, "edit")
			if err != nil || len(got) != len(want) {
				b.Fatal(err)
			}
		}
	})
}

// TestPlainRun checks the 8-bytes-at-a-time run against its definition,
// with each kind of byte that ends a run at every place of a word.
func TestPlainRun(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	for _, stop := range []byte{0, 0x1f, '"', '\\', 0x80, 0xc3, 0xff} {
		for n := 0; n <= 20; n++ {
			for at := 0; at <= n; at++ {
				b := []byte(strings.Repeat("a~ !#[]\x7f", 3))[:n]
				if at < n {
					b[at] = stop
				}
				want := 0
				for want < len(b) && plain(b[want]) {
					want++
				}
				if got := plainRun(b); got != want {
					t.Fatalf("plainRun(%q) = %d, want %d", b, got, want)
				}
			}
		}
	}
}
