package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/canon-sync/canon/pipelines"
)

// The pipelines commands tell a job's refused options by their flags:
// the library names its options' Go fields, canon maps them. These are
// refused before anything connects to the brokers.
func TestPipelineErrorsNameFlags(t *testing.T) {
	snapless := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(snapless, []byte(`{"type":"header","format":"canon-export","formatVersion":1,"org":"acme","project":"doc"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kafka := []string{"--brokers", "127.0.0.1:1", "--project", "acme/doc"}
	for _, tc := range []struct {
		args []string
		want string
		is   error
	}{
		{[]string{"rebase", "--from", "1", "--onto", "main", "--into", "main"},
			"--into main names an existing branch of the job: give a new name", nil},
		{[]string{"replay", "--into", "acme/doc"},
			"--into acme/doc is the source project: give a new project or a branch name", nil},
		{[]string{"replay", "--into", "main"},
			"--into main is the source branch: give a new branch name", nil},
		{[]string{"rebase", "--from", "1", "--onto-snapshot", snapless, "--into", "copy"},
			"snapshot file " + snapless + ": the file holds no snapshot: export one with canon export (a history export ends with the snapshot of --branch)",
			pipelines.ErrNoSnapshot},
	} {
		cmd := newRootCmd(Options{})
		cmd.SetArgs(append(tc.args, kafka...))
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		if err == nil || err.Error() != tc.want {
			t.Errorf("canon %v: %v, want %q", tc.args, err, tc.want)
			continue
		}
		var oe *pipelines.OptionError
		if tc.is != nil && !errors.Is(err, tc.is) || tc.is == nil && !errors.As(err, &oe) {
			t.Errorf("canon %v: %v does not wrap the library's error", tc.args, err)
		}
	}
}
