package readapi

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

// docs/openapi.yaml passes Redocly's linter with the rules of
// tools/openapi-lint/redocly.yaml (warnings are errors), with the
// version of the linter pinned there and installed by npm ci.
func TestOpenAPILint(t *testing.T) {
	dir := testenv.NPMProject(t, filepath.Join("..", "tools", "openapi-lint"), "@redocly/cli")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "redocly"), "lint",
		"--config", "redocly.yaml", "--format", "stylish", filepath.Join("..", "..", "docs", "openapi.yaml"))
	cmd.Dir = dir
	// No telemetry nor update check: the test runs where only package
	// registries answer.
	cmd.Env = append(cmd.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redocly lint docs/openapi.yaml: %v\n%s", err, out)
	}
}
