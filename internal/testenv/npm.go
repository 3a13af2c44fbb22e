package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// NPMProject prepares the npm project in dir for a test that runs Node:
// node and npm must be there (in CI their absence fails the test,
// elsewhere it skips it), and `npm ci` installs the locked packages when
// node_modules lacks the package named installed or is older than
// package-lock.json (the lock changed since the last install). It returns
// dir made absolute.
func NPMProject(tb testing.TB, dir, installed string) string {
	tb.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if InCI() {
				tb.Fatalf("%s is not installed: the test needs Node 20+ with npm", tool)
			}
			tb.Skipf("%s is not installed: the test needs Node 20+ with npm", tool)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", installed)); err != nil || stale(dir) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// stale tells whether package-lock.json is newer than the lock npm wrote
// into node_modules when it last installed.
func stale(dir string) bool {
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return false
	}
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	return err != nil || lock.ModTime().After(installed.ModTime())
}
