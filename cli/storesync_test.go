package cli

import (
	"errors"
	"strings"
	"testing"
)

func TestParseStoreSync(t *testing.T) {
	for _, tc := range []struct {
		in     string
		noSync bool
		err    string
	}{
		{in: "always"},
		{in: "", noSync: true},
		{in: "never", noSync: true},
		{in: "Never", err: `--store-sync "Never": pass never or always`},
		{in: "sometimes", err: `--store-sync "sometimes": pass never or always`},
	} {
		got, err := parseStoreSync(tc.in)
		if tc.err != "" {
			var usage usageError
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &usage) {
				t.Errorf("parseStoreSync(%q) = %v, %v; want a usage error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.noSync {
			t.Errorf("parseStoreSync(%q) = %v, %v; want %v", tc.in, got, err, tc.noSync)
		}
	}
}
