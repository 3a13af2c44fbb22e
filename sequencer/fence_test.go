package sequencer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadInstanceID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	id, err := LoadInstanceID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkInstanceID(id); err != nil {
		t.Fatalf("made an id Kafka refuses: %v", err)
	}
	again, err := LoadInstanceID(dir)
	if err != nil || again != id {
		t.Fatalf("second start: %q, %v; want the same id %q", again, err, id)
	}
	if other, _ := LoadInstanceID(t.TempDir()); other == id {
		t.Fatalf("two data dirs got the same id %q", id)
	}
	if err := os.WriteFile(filepath.Join(dir, InstanceFile), []byte("bad id/1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadInstanceID(dir); err == nil || !strings.Contains(err.Error(), "delete the file") {
		t.Fatalf("a bad id in the file: %v, want an error that says to delete it", err)
	}
}

func TestCheckInstanceID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"seq-1", true},
		{"host.example_2-a1b2c3", true},
		{"", false},
		{"a b", false},
		{"a/b", false},
		{strings.Repeat("x", 249), true},
		{strings.Repeat("x", 250), false},
	} {
		if err := checkInstanceID(tc.id); (err == nil) != tc.ok {
			t.Errorf("checkInstanceID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
}
