package pipelines

import (
	"context"
	"testing"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// checkLineage reads the target's versions 1..n from the changelog: every
// mutation records the rebase job (run by principal, at or after
// started), and each re-sent one the mutation of src it re-sends; the
// job's branch.create has no origin.
func checkLineage(t *testing.T, ctx context.Context, cfg Config, target, src BranchRef, principal string, n uint64, started time.Time) {
	t.Helper()
	h, err := readHistory(ctx, cfg.withDefaults(), false, target.ProjectRef)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for v := uint64(1); v <= n; v++ {
		ver := h.version(target, v)
		if ver == nil {
			t.Fatalf("%s has no version %d in the changelog", target, v)
		}
		o := ver.Mutations[0]
		if o.Job == nil || o.Job.Kind != JobRebase || o.Job.Principal != principal || o.Job.At < started.UnixMilli() {
			t.Errorf("%s@%d: job %+v, want rebase by %s at or after %d", target, v, o.Job, principal, started.UnixMilli())
		}
		if o.Principal != "" {
			t.Errorf("%s@%d: principal %q on a re-sent mutation", target, v, o.Principal)
		}
		if v == 1 {
			if o.Origin != nil {
				t.Errorf("%s@1 (the job's branch.create): origin %+v", target, o.Origin)
			}
			continue
		}
		srcVer := h.version(src, v)
		so := srcVer.Mutations[0]
		want := schemas.Origin{Branch: src.Branch, Version: v, Client: so.Client, ID: so.ID}
		if o.Origin == nil || *o.Origin != want {
			t.Errorf("%s@%d: origin %+v, want %+v", target, v, o.Origin, want)
		}
	}
}
