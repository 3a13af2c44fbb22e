package canontest

import (
	"os"
	"testing"

	"github.com/canon-sync/canon/internal/checkpoint"
)

// CorruptFile replaces the file at path, as fileblob replaces objects
// (a new file renamed over it), by a copy with one byte changed in its
// middle: in a table, a data block's. Its size is kept, so only a
// checksum finds it.
func CorruptFile(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(path+".new", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// LargestOwnFile is the largest file of checkpoint newer that none of
// older holds: corrupting it spoils newer only.
func LargestOwnFile(t testing.TB, newer *checkpoint.Manifest, older ...*checkpoint.Manifest) checkpoint.File {
	t.Helper()
	in := map[string]bool{}
	for _, m := range older {
		for _, f := range m.Files {
			in[f.SHA256] = true
		}
	}
	var own checkpoint.File
	for _, f := range newer.Files {
		if !in[f.SHA256] && f.Size > own.Size {
			own = f
		}
	}
	if own.Size == 0 {
		t.Fatalf("the checkpoint at offset %d has no file of its own", newer.Offset)
	}
	return own
}
