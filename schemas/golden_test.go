package schemas

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// A golden record under testdata/<kind>/{valid,invalid}/. JSON kinds are
// NAME.json; chunks are NAME.bin (the value) with NAME.hdr ("key: …" and
// "canon-chunk: …" lines). An invalid record has NAME.err: a substring of
// the error its decoder must return.
type golden struct {
	kind, name string
	value      []byte
	key        []byte // chunk
	hash       string // chunk
	wantErr    string // invalid
}

var jsonKinds = []string{KindMutation, KindVersion, KindRejected, KindDeploy}

func schemaOf(kind string) string { return kind + "/v1" }

func loadGolden(t testing.TB, kind, dir string) []golden {
	t.Helper()
	ext := ".json"
	if kind == KindChunk {
		ext = ".bin"
	}
	paths, err := filepath.Glob(filepath.Join("testdata", kind, dir, "*"+ext))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files in testdata/%s/%s (%v)", kind, dir, err)
	}
	var gs []golden
	for _, p := range paths {
		g := golden{kind: kind, name: strings.TrimSuffix(filepath.Base(p), ext)}
		g.value = readFile(t, p)
		base := strings.TrimSuffix(p, ext)
		if kind == KindChunk {
			for _, line := range strings.Split(string(readFile(t, base+".hdr")), "\n") {
				if k, v, ok := strings.Cut(line, ": "); ok {
					switch k {
					case "key":
						g.key = []byte(v)
					case HeaderChunkHash:
						g.hash = v
					default:
						t.Fatalf("%s.hdr: unknown line %q", base, line)
					}
				}
			}
		}
		if dir == "invalid" {
			g.wantErr = strings.TrimSpace(string(readFile(t, base+".err")))
			if g.wantErr == "" {
				t.Fatalf("%s.err is empty", base)
			}
		}
		gs = append(gs, g)
	}
	return gs
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode and encode dispatch on a kind, for tests over every kind.
func decode(kind string, value []byte, l Limits) (any, error) {
	switch kind {
	case KindMutation:
		return DecodeMutation(SchemaMutationV1, value, l)
	case KindVersion:
		return DecodeVersion(SchemaVersionV1, value, l)
	case KindRejected:
		return DecodeRejected(SchemaRejectedV1, value, l)
	case KindDeploy:
		return DecodeDeploy(SchemaDeployV1, value)
	}
	panic("no JSON decoder for " + kind)
}

func encode(v any, l Limits) ([]byte, error) {
	switch v := v.(type) {
	case *Mutation:
		return EncodeMutation(v, l)
	case *Version:
		return EncodeVersion(v, l)
	case *Rejected:
		return EncodeRejected(v, l)
	case *Deploy:
		return EncodeDeploy(v)
	}
	panic("no JSON encoder")
}

func canonical(t testing.TB, b []byte) []byte {
	t.Helper()
	c, err := jcs.Transform(b)
	if err != nil {
		t.Fatalf("canonicalize %s: %v", b, err)
	}
	return c
}

func TestGoldenValid(t *testing.T) {
	for _, kind := range jsonKinds {
		for _, g := range loadGolden(t, kind, "valid") {
			t.Run(kind+"/"+g.name, func(t *testing.T) {
				v, err := decode(kind, g.value, DefaultLimits())
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				enc, err := encode(v, DefaultLimits())
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
				if got, want := canonical(t, enc), canonical(t, g.value); !bytes.Equal(got, want) {
					t.Errorf("re-encoding differs from the golden file\n got: %s\nwant: %s", got, want)
				}
				again, err := decode(kind, enc, DefaultLimits())
				if err != nil {
					t.Fatalf("decode the encoding: %v\n%s", err, enc)
				}
				if !reflect.DeepEqual(again, v) {
					t.Errorf("decode(encode(v)) != v\n got: %+v\nwant: %+v", again, v)
				}
			})
		}
	}
}

func TestGoldenChunkValid(t *testing.T) {
	for _, g := range loadGolden(t, KindChunk, "valid") {
		t.Run(g.name, func(t *testing.T) {
			c, err := DecodeChunk(SchemaChunkV1, g.hash, g.key, g.value, DefaultLimits())
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if key := string(ProjectKey(c.Org, c.Project)); key != string(g.key) {
				t.Errorf("org/project = %q, want %q", key, g.key)
			}
			if c.Hash != g.hash || !bytes.Equal(c.Data, g.value) {
				t.Errorf("decoded chunk = %s %q, want %s %q", c.Hash, c.Data, g.hash, g.value)
			}
			value, hash := EncodeChunk(c)
			if hash != g.hash || !bytes.Equal(value, g.value) {
				t.Errorf("EncodeChunk = %s %q, want %s %q", hash, value, g.hash, g.value)
			}
		})
	}
}

func TestGoldenInvalid(t *testing.T) {
	for _, kind := range append(slices.Clone(jsonKinds), KindChunk) {
		for _, g := range loadGolden(t, kind, "invalid") {
			t.Run(kind+"/"+g.name, func(t *testing.T) {
				var err error
				if kind == KindChunk {
					_, err = DecodeChunk(SchemaChunkV1, g.hash, g.key, g.value, DefaultLimits())
				} else {
					_, err = decode(kind, g.value, DefaultLimits())
				}
				if err == nil {
					t.Fatalf("decoded, want an error containing %q", g.wantErr)
				}
				if !strings.Contains(err.Error(), g.wantErr) {
					t.Errorf("error = %q\nwant it to contain %q", err, g.wantErr)
				}
				// A field problem is a *FieldError; otherwise the value is
				// not JSON of the right shape.
				var fe *FieldError
				if !errors.As(err, &fe) && !errors.Is(err, ErrUndecodable) {
					t.Errorf("error %q is neither a *FieldError nor ErrUndecodable", err)
				}
			})
		}
	}
}

// Every .err and .hdr file belongs to a record, so that a renamed golden
// file cannot silently stop being tested.
func TestGoldenFilesArePaired(t *testing.T) {
	for _, kind := range append(slices.Clone(jsonKinds), KindChunk) {
		for _, dir := range []string{"valid", "invalid"} {
			ext := ".json"
			if kind == KindChunk {
				ext = ".bin"
			}
			all, _ := filepath.Glob(filepath.Join("testdata", kind, dir, "*"))
			for _, p := range all {
				base := strings.TrimSuffix(p, filepath.Ext(p))
				switch filepath.Ext(p) {
				case ext:
				case ".err", ".hdr":
					if _, err := os.Stat(base + ext); err != nil {
						t.Errorf("%s has no %s", p, base+ext)
					}
				default:
					t.Errorf("unexpected file %s", p)
				}
			}
		}
	}
}
