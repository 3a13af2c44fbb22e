package main

import (
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/loadgen"
)

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want loadgen.Mix
		err  string
	}{
		{in: mixString(loadgen.DefaultMix), want: loadgen.DefaultMix},
		{in: "put=1, large-put=2", want: loadgen.Mix{Put: 1, LargePut: 2}},
		{in: "put=1,bogus=2", err: `"bogus=2" is not KIND=WEIGHT`},
		{in: "put=-1", err: "WEIGHT ≥ 0"},
		{in: "put", err: "KIND=WEIGHT"},
	} {
		got, err := parseMix(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseMix(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseMix(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
