package schemas

import (
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestStateHasherIsASetHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var digests [][32]byte
	for i := range 200 {
		meta := []byte{byte(rng.Uint32()), byte(i)}
		digests = append(digests, ItemDigest("c", string(rune('a'+i%26))+string(rune(i)), meta, "h"))
	}
	mod := new(big.Int).Lsh(big.NewInt(1), 256)
	var a StateHasher
	want := new(big.Int)
	for _, d := range digests {
		a.Add(d)
		want.Add(want, new(big.Int).SetBytes(d[:]))
	}
	want.Mod(want, mod)
	if got := new(big.Int).SetBytes(a.Sum[:]); got.Cmp(want) != 0 {
		t.Fatalf("sum = %x, want %x", got, want)
	}
	// Order does not matter; removal undoes addition.
	var b StateHasher
	for _, i := range rng.Perm(len(digests)) {
		b.Add(digests[i])
	}
	if a != b {
		t.Fatal("sum depends on order")
	}
	for _, d := range digests[100:] {
		b.Remove(d)
	}
	var c StateHasher
	for _, d := range digests[:100] {
		c.Add(d)
	}
	if b != c {
		t.Fatal("Remove does not undo Add")
	}
	for _, d := range digests[:100] {
		b.Remove(d)
	}
	if b != (StateHasher{}) {
		t.Fatal("removing everything does not give the empty set")
	}
}

func TestStateHashCoversScalarsAndItems(t *testing.T) {
	var s StateHasher
	h0, _ := s.StateHash(nil)
	h1, _ := s.StateHash(map[string]json.RawMessage{"name": json.RawMessage(`"x"`)})
	// Key order and whitespace do not matter: scalars are canonicalized.
	h2, _ := s.StateHash(map[string]json.RawMessage{"b": json.RawMessage(`{"y":1, "x":2}`), "a": json.RawMessage(`1`)})
	h3, _ := s.StateHash(map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`{"x":2,"y":1}`)})
	if h0 == h1 || h2 != h3 {
		t.Fatalf("h0=%s h1=%s h2=%s h3=%s", h0, h1, h2, h3)
	}
	s.Add(ItemDigest("c", "i", []byte(`{}`), "abc"))
	h4, _ := s.StateHash(nil)
	if h4 == h0 {
		t.Fatal("an item does not change the state hash")
	}
	if ItemDigest("ab", "c", nil, "") == ItemDigest("a", "bc", nil, "") {
		t.Fatal("item digest is ambiguous across field boundaries")
	}
}
