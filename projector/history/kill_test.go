package history

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

// newProjProc is a `canon serve --roles projector` process, restartable.
func newProjProc(t *testing.T, f *fixture, extra ...string) *testenv.CanonProcess {
	t.Helper()
	args := append([]string{"serve", "--roles", "projector",
		"--brokers", strings.Join(f.brokers, ","),
		"--topic-prefix", f.prefix,
		"--topic-partitions", strconv.Itoa(int(f.info.Partitions)),
		"--data", filepath.Join(testenv.ProcessDir(t, "projector"), "data"),
		"--http", "127.0.0.1:0",
		"--clickhouse", f.ch.Addr,
		"--clickhouse-database", f.db,
		"--projector-session-timeout", "2s",
	}, extra...)
	return testenv.NewCanonProcess(t, "projector", args...)
}

// The projector is killed with SIGKILL several times while it inserts
// and commits, and restarted each time; in the end the tables,
// deduplicated, hold exactly what canon.versions holds.
func TestProjectorSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds canon and runs it against the real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 4)
	ms := workload(t, 8, 3, 60, 7)
	f.produce(t, ctx, ms)
	f.runSequencer(t, ctx)
	content := f.readVersions(t, ctx, len(ms))
	t.Logf("%d versions and %d chunks (%d bytes) in %s", len(content.versions), content.chunks, sum(content.chunkBytes), f.info.Names.Versions)

	p := newProjProc(t, f, "--projector-batch-rows", "300", "--projector-batch-interval", "50ms")
	conn := f.ch.Conn(t, "default")
	physical := func() uint64 {
		var n uint64
		// The table may not exist yet: then 0.
		_ = conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = ? AND table = 'mutations' AND active", f.db).Scan(&n)
		if n == 0 {
			return 0
		}
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+f.db+".mutations").Scan(&n)
		return n
	}
	const kills = 5
	total := uint64(len(ms))
	midway := 0
	for k := 1; k <= kills; k++ {
		p.Start(ctx)
		// Kill as soon as this run inserted rows beyond the k-th step:
		// batches are being inserted and committed right then.
		before := physical()
		target := max(before+1, total*uint64(k)/(kills+2))
		for physical() < target {
			if ctx.Err() != nil {
				t.Fatalf("no progress to %d mutation rows before kill %d", target, k)
			}
			time.Sleep(5 * time.Millisecond)
		}
		p.Kill()
		var final uint64
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+f.db+".mutations FINAL").Scan(&final)
		if final < total {
			midway++
		}
		t.Logf("kill %d: %d mutation rows (%d distinct of %d)", k, physical(), final, total)
	}
	if midway < 3 {
		t.Fatalf("only %d of %d kills happened before the projection was complete: make the workload larger", midway, kills)
	}

	p.Start(ctx)
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".versions FINAL", total)
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".mutations FINAL", total)
	// Caught up: the lag gauge falls to 0 once every offset is committed.
	for {
		lag, err := p.Metric("canon_projector_lag_records")
		if err == nil && lag == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("lag never reached 0 (last %v, %v)", lag, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Stop()
	t.Logf("%d mutation rows inserted for %d mutations", physical(), total)
	checkTables(t, ctx, f, content)
	p.CheckLog()
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}
