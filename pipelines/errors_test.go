package pipelines

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/kafka"
)

// A job's options that cannot work are refused before anything connects,
// with an OptionError that names them by their Go fields; Explain names
// them as a command's flags do.
func TestOptionErrorsNameFields(t *testing.T) {
	cfg := Config{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:1"}}}
	src := BranchRef{ProjectRef{"acme", "doc"}, "main"}
	flags := map[string]string{"Into": "--into"}
	for _, tc := range []struct {
		name   string
		run    func() error
		option string
		text   string // with the Go names
		flags  string // with flags
		wraps  bool
	}{
		{"rebase into its source", func() error {
			_, err := Rebase(context.Background(), cfg, RebaseOptions{Source: src, From: 1, Onto: &BranchAt{Branch: "main"}, Into: "main"})
			return err
		}, "Into", "Into main names an existing branch of the job: give a new name", "--into main names an existing branch of the job: give a new name", false},
		{"rebase into a bad name", func() error {
			_, err := Rebase(context.Background(), cfg, RebaseOptions{Source: src, From: 1, Onto: &BranchAt{Branch: "main"}, Into: "no way"})
			return err
		}, "Into", "Into: ", "--into: ", true},
		{"replay into its source project", func() error {
			_, err := Replay(context.Background(), cfg, ReplayOptions{Source: src, Into: "acme/doc"})
			return err
		}, "Into", "Into acme/doc is the source project: give a new project or a branch name", "--into acme/doc is the source project: give a new project or a branch name", false},
		{"replay nowhere", func() error {
			_, err := Replay(context.Background(), cfg, ReplayOptions{Source: src})
			return err
		}, "Into", "Into is required: a new branch name, or ORG/PROJECT for a new project", "--into is required: a new branch name, or ORG/PROJECT for a new project", false},
	} {
		err := tc.run()
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%s: %v, want an OptionError", tc.name, err)
			continue
		}
		if oe.Option != tc.option || !strings.HasPrefix(err.Error(), tc.text) || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: option %q, %q: want option %q and a message starting %q", tc.name, oe.Option, err, tc.option, tc.text)
		}
		explained := oe.Explain(func(option string) string { return flags[option] })
		if !strings.HasPrefix(explained, tc.flags) {
			t.Errorf("%s: explained %q, want it to start %q", tc.name, explained, tc.flags)
		}
		if tc.wraps != (oe.Unwrap() != nil) {
			t.Errorf("%s: Unwrap %v, want wrapped %v", tc.name, oe.Unwrap(), tc.wraps)
		}
	}
}

// A file without a snapshot is ErrNoSnapshot.
func TestNoSnapshotIsSentinel(t *testing.T) {
	_, err := ReadSnapshot(strings.NewReader(exportFile(`{"type":"header","format":"canon-export","formatVersion":1,"org":"acme","project":"doc"}`)))
	if !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("%v, want ErrNoSnapshot", err)
	}
}
