package schemas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/gowebpki/jcs"
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

// referenceStateHash is the definition of the state hash, without the
// quick paths of ItemDigest and StateHash.
func referenceStateHash(s StateHasher, scalars map[string]json.RawMessage) (string, error) {
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	raw, err := json.Marshal(scalars)
	if err != nil {
		return "", err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte("canon-state/v1\x00"))
	sc := sha256.Sum256(canon)
	h.Write(sc[:])
	h.Write(s.Sum[:])
	return hex.EncodeToString(h.Sum(nil)), nil
}

func referenceItemDigest(collection, id string, meta []byte, bodyHash string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(collection), []byte(id), meta, []byte(bodyHash)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// The quick paths hash what the definition hashes: scalars written
// without canonicalizing when they can be, parts hashed in one piece.
func TestStateHashMatchesDefinition(t *testing.T) {
	values := []string{`1`, `-7`, `0`, `"x"`, `"é😀<&>"`, `true`, `null`, `1.50`, `1e3`, `"a\u0041"`, `{"b":1,"a":[2, 3]}`, `[]`, `12345678901234567`}
	names := []string{"a", "b", "name", "Z", "a_1", "é", "x\"y"}
	rng := rand.New(rand.NewPCG(3, 4))
	var s StateHasher
	for i := range 500 {
		sc := map[string]json.RawMessage{}
		for range rng.IntN(6) {
			sc[names[rng.IntN(len(names))]] = json.RawMessage(values[rng.IntN(len(values))])
		}
		if i%7 == 0 {
			sc = nil
		}
		got, err := s.StateHash(sc)
		want, werr := referenceStateHash(s, sc)
		if got != want || (err == nil) != (werr == nil) {
			t.Fatalf("StateHash(%s) = %s, %v; want %s, %v", sc, got, err, want, werr)
		}
		meta := make([]byte, rng.IntN(3)*300)
		if d, w := ItemDigest("c", names[i%len(names)], meta, values[i%len(values)]), referenceItemDigest("c", names[i%len(names)], meta, values[i%len(values)]); d != w {
			t.Fatalf("ItemDigest differs for meta of %d bytes", len(meta))
		}
		s.Add([32]byte{byte(i)})
	}
	if _, err := s.StateHash(map[string]json.RawMessage{"a": json.RawMessage(`{`)}); err == nil {
		t.Fatal("invalid scalars hash")
	}
}
