package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Environment variables of the browser tests.
const (
	// EnvChromium is the Chromium (or Chrome) binary the browser tests
	// drive; by default the first of chromiumNames on PATH.
	EnvChromium = "CANON_TEST_CHROMIUM"
	// EnvArtifacts is a directory for what tests keep for people to look
	// at (the browser tests' screenshots), one subdirectory per test.
	EnvArtifacts = "CANON_TEST_ARTIFACTS"
)

// chromiumNames are looked up on PATH in order: Debian's package installs
// chromium.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Chromium returns the path of a Chromium binary for a browser test. Like
// the servers, a missing browser skips the test only under -short outside
// CI; otherwise it fails it, saying how to install one.
func Chromium(tb testing.TB) string {
	tb.Helper()
	requireIntegration(tb)
	p, err := findChromium()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return p
}

func findChromium() (string, error) {
	if v := os.Getenv(EnvChromium); v != "" {
		p, err := exec.LookPath(v)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w: set it to a Chromium or Chrome binary", EnvChromium, v, err)
		}
		return p, nil
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium for the browser tests (looked for %s on PATH): install Debian's with "+
		"`sudo apt-get install -y chromium` (make deps does it as root), or set %s to a Chromium or Chrome binary",
		strings.Join(chromiumNames, ", "), EnvChromium)
}

// ArtifactDir returns the directory where a test keeps its artifacts:
// $CANON_TEST_ARTIFACTS/<test name> when the variable is set (CI uploads
// it), else the test's own artifact directory (kept under the output
// directory with go test -artifacts, removed after the test otherwise).
func ArtifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv(EnvArtifacts)
	if root == "" {
		return t.ArtifactDir()
	}
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testenv: %s: %v", EnvArtifacts, err)
	}
	return dir
}
