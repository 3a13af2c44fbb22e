package webui

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

// The diff of the item history view (assets/diff.js) is checked with node:
// the edit script rebuilds both texts and is minimal (against an LCS on
// random cases), a diff too large gives up, and the hunks carry the right
// lines and line numbers.
func TestDiffWithNode(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		if testenv.InCI() {
			t.Fatal("node is not installed: the web UI's diff test needs Node 20+")
		}
		t.Skip("node is not installed: the web UI's diff test needs Node 20+")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "diff_test.mjs")
	cmd.Dir = "testdata"
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node diff_test.mjs: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	if got := stdout.String(); got != "ok\n" {
		t.Fatalf("node diff_test.mjs printed %q", got)
	}
}
