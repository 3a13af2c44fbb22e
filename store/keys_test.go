package store

import (
	"bytes"
	"cmp"
	"testing"
)

func TestStringEncodingOrderAndRoundTrip(t *testing.T) {
	strs := []string{"", "\x00", "\x00\x00", "\x00\x01", "\x00\xff", "\x01", "a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\xff", "\xff\x00", "\xff\xff"}
	for _, a := range strs {
		ea := appendString([]byte("pre"), a)
		got, rest, err := decodeString(ea[3:])
		if err != nil || got != a || len(rest) != 0 {
			t.Errorf("decode(encode(%q)) = %q, rest %x, %v", a, got, rest, err)
		}
		for _, b := range strs {
			eb := appendString(nil, b)
			if c := bytes.Compare(appendString(nil, a), eb); c != cmp.Compare(a, b) {
				t.Errorf("compare(enc %q, enc %q) = %d, strings compare %d", a, b, c, cmp.Compare(a, b))
			}
			// Tuples keep the order of their first component.
			ka := appendString(appendString(nil, a), "zzz")
			kb := appendString(appendString(nil, b), "")
			if a != b && bytes.Compare(ka, kb) != cmp.Compare(a, b) {
				t.Errorf("tuple (%q, zzz) vs (%q, \"\") out of order", a, b)
			}
			// prefixEnd of an encoded string bounds exactly the keys
			// that start with that string.
			ext := appendString(appendString(nil, b), "x")
			enc := appendString(nil, a)
			in := bytes.Compare(ext, enc) >= 0 && bytes.Compare(ext, prefixEnd(enc)) < 0
			if in != (a == b) {
				t.Errorf("range of %q contains (%q, x): %v", a, b, in)
			}
		}
	}
	for _, bad := range [][]byte{nil, {'a'}, {0}, {0, 2}, {'a', 0, 0x7f}} {
		if _, _, err := decodeString(bad); err == nil {
			t.Errorf("decodeString(%x) accepted a malformed string", bad)
		}
	}
}

func TestItemKeysSortNewestFirst(t *testing.T) {
	k := func(id string, v uint64) []byte { return itemKey(1, "o", "p", "main", "c", id, v) }
	ordered := [][]byte{k("a", 9), k("a", 2), k("a", 1), k("a\x00", 5), k("ab", 7)}
	for i := 1; i < len(ordered); i++ {
		if bytes.Compare(ordered[i-1], ordered[i]) >= 0 {
			t.Errorf("key %d >= key %d", i-1, i)
		}
	}
	n := len(branchPrefix(1, kindItem, "o", "p", "main"))
	c, id, v, err := decodeItemSuffix(k("a\x00", 5)[n:])
	if err != nil || c != "c" || id != "a\x00" || v != 5 {
		t.Errorf("decodeItemSuffix = %q %q %d %v", c, id, v, err)
	}
	// Every key of partition 1 sorts inside its prefix range, and the
	// global meta outside every partition.
	lo := partitionPrefix(1)
	for _, key := range [][]byte{k("a", 1), offsetKey(1), headKey(1, "o", "p", "b"), chunkKey(1, "o", "p", [32]byte{0xff})} {
		if !bytes.HasPrefix(key, lo) || bytes.Compare(key, prefixEnd(lo)) >= 0 {
			t.Errorf("key %x outside partition 1", key)
		}
	}
	if bytes.Compare(partitionsKey(), prefixEnd(partitionPrefix(1<<31-1))) < 0 {
		t.Error("the global meta key sorts inside a partition")
	}
}

func FuzzStringEncoding(f *testing.F) {
	f.Add("a", "b")
	f.Add("\x00", "\x00\xff")
	f.Add("", "\x00\x01")
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := appendString(nil, a), appendString(nil, b)
		if bytes.Compare(ea, eb) != cmp.Compare(a, b) {
			t.Fatalf("order of %q and %q not preserved", a, b)
		}
		got, rest, err := decodeString(append(ea, eb...))
		if err != nil || got != a {
			t.Fatalf("decode %q: %q %v", a, got, err)
		}
		if got, rest, err = decodeString(rest); err != nil || got != b || len(rest) != 0 {
			t.Fatalf("decode %q: %q %v", b, got, err)
		}
	})
}
