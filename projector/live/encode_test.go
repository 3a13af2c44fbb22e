package live

import (
	"bytes"
	"strings"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

func TestVersionFrameHeaders(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 70000} {
		v := &schemas.Version{Org: "o", StateHash: strings.Repeat("x", n)}
		payload, err := encodeVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		frame, err := versionFrame(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := textFrame(payload); !bytes.Equal(frame, want) {
			t.Errorf("hash of %d bytes: frame header % x, want % x", n, frame[:min(10, len(frame))], want[:min(10, len(want))])
		}
	}
}

// BenchmarkEncodeVersion is what the hub does per version that has
// subscribers: encode it once and make the bytes every subscriber writes
// (wire's BenchmarkEncodeVersion compares the encoding with
// encoding/json's).
func BenchmarkEncodeVersion(b *testing.B) {
	v := benchVersion(7, 42)
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			if _, err := versionFrame(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
