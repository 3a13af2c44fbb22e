package schemas

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"
)

// fuzzLimits are small enough that the fuzzers reach every size limit and
// large enough that the golden files pass them.
var fuzzLimits = Limits{
	MaxScalarsBytes:  256,
	MaxMetaBytes:     64,
	MaxDataBytes:     1000,
	MaxArgsBytes:     512,
	MaxMutationBytes: 4096,
	MaxChunkBytes:    128,
}

// maxErrorBytes bounds an error message: errors end up in rejected
// records and logs, and must not echo a large value back.
const maxErrorBytes = 1024

func seedGolden(f *testing.F, kind string) {
	for _, dir := range []string{"valid", "invalid"} {
		for _, g := range loadGolden(f, kind, dir) {
			if kind == KindChunk {
				f.Add(g.hash, g.key, g.value)
			} else {
				f.Add(g.value)
			}
		}
	}
}

// checkDecodeError checks what every decode error must be: short, and of
// a kind RejectReason can map.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	if len(err.Error()) > maxErrorBytes {
		t.Fatalf("error message of %d bytes: %.200s…", len(err.Error()), err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) && !errors.Is(err, ErrUndecodable) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("error of no known kind: %v", err)
	}
}

// roundTrip checks that what a decoder accepts its encoder writes, and
// that decoding that gives the same value.
func roundTrip[T any](t *testing.T, v *T, enc func(*T, Limits) ([]byte, error), dec func(string, []byte, Limits) (*T, error), schema string) {
	t.Helper()
	b, err := enc(v, fuzzLimits)
	if err != nil {
		t.Fatalf("decoded %+v, but encoding it fails: %v", v, err)
	}
	again, err := dec(schema, b, fuzzLimits)
	if err != nil {
		t.Fatalf("decoding the encoding fails: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(again, v) {
		t.Fatalf("decode(encode(v)) != v\n got: %#v\nwant: %#v", again, v)
	}
	b2, err := enc(again, fuzzLimits)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("encoding is not stable: %s\n%s (%v)", b, b2, err)
	}
}

func FuzzDecodeMutation(f *testing.F) {
	seedGolden(f, KindMutation)
	f.Fuzz(func(t *testing.T, value []byte) {
		m, err := DecodeMutation(SchemaMutationV1, value, fuzzLimits)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		roundTrip(t, m, EncodeMutation, DecodeMutation, SchemaMutationV1)
	})
}

func FuzzDecodeVersion(f *testing.F) {
	seedGolden(f, KindVersion)
	f.Fuzz(func(t *testing.T, value []byte) {
		v, err := DecodeVersion(SchemaVersionV1, value, fuzzLimits)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		roundTrip(t, v, EncodeVersion, DecodeVersion, SchemaVersionV1)
	})
}

func FuzzDecodeRejected(f *testing.F) {
	seedGolden(f, KindRejected)
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := DecodeRejected(SchemaRejectedV1, value, fuzzLimits)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		roundTrip(t, r, EncodeRejected, DecodeRejected, SchemaRejectedV1)
	})
}

func FuzzDecodeDeploy(f *testing.F) {
	seedGolden(f, KindDeploy)
	f.Fuzz(func(t *testing.T, value []byte) {
		d, err := DecodeDeploy(SchemaDeployV1, value)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		b, err := EncodeDeploy(d)
		if err != nil {
			t.Fatalf("decoded %+v, but encoding it fails: %v", d, err)
		}
		again, err := DecodeDeploy(SchemaDeployV1, b)
		if err != nil {
			t.Fatalf("decode the encoding: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(again, d) {
			t.Fatalf("decode(encode(d)) != d\n got: %+v\nwant: %+v", again, d)
		}
	})
}

func FuzzDecodeChunk(f *testing.F) {
	seedGolden(f, KindChunk)
	f.Fuzz(func(t *testing.T, hash string, key, value []byte) {
		c, err := DecodeChunk(SchemaChunkV1, hash, key, value, fuzzLimits)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		v, h := EncodeChunk(c)
		if h != hash || !bytes.Equal(v, value) {
			t.Fatalf("EncodeChunk = %s %q, want %s %q", h, v, hash, value)
		}
		if k := ProjectKey(c.Org, c.Project); !bytes.Equal(k, key) {
			t.Fatalf("ProjectKey(%q, %q) = %q, want the record key %q", c.Org, c.Project, k, key)
		}
	})
}

func FuzzParseSchema(f *testing.F) {
	for _, h := range []string{"", SchemaMutationV1, SchemaVersionV1, SchemaChunkV1, SchemaRejectedV1, "mutation/v2", "mutation/1", "widget/v1", "a/v01", "x_1/v999999999"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		kind, major, err := ParseSchema(header)
		if err != nil {
			if !errors.Is(err, ErrUnknownSchema) {
				t.Fatalf("ParseSchema(%q) error is not ErrUnknownSchema: %v", header, err)
			}
			if len(err.Error()) > maxErrorBytes {
				t.Fatalf("error message of %d bytes", len(err.Error()))
			}
			if kind != "" && kind+"/v"+strconv.Itoa(major) != header {
				t.Fatalf("ParseSchema(%q) = %q, %d with %v", header, kind, major, err)
			}
			return
		}
		if kind+"/v"+strconv.Itoa(major) != header {
			t.Fatalf("ParseSchema(%q) = %q, %d", header, kind, major)
		}
		if _, ok := readable(kind); !ok {
			t.Fatalf("ParseSchema(%q) accepts an unknown kind", header)
		}
	})
}
