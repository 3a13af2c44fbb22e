package pipelines

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkReplay10000 replays a project of 10,000 mutations (the
// determinism test's) in memory and through the sequencer on the real
// broker; ns/op is one whole replay, read of the history included.
func BenchmarkReplay10000(b *testing.B) {
	const n = 10000
	ctx := testCtx(b)
	e := newEnv(b, nil)
	p := ProjectRef{"acme", "bench"}
	main := BranchRef{p, "main"}
	e.push(b, ctx, p, bigHistory(n)...)
	e.waitHead(b, ctx, main, n)

	b.Run("in-memory", func(b *testing.B) {
		for b.Loop() {
			res, err := Replay(context.Background(), e.cfg, ReplayOptions{Source: main, InMemory: true})
			if err != nil || !res.Deterministic {
				b.Fatal(err, res)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "mutations/s")
	})
	b.Run("sequencer", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			// Each replay into a branch of its own, from version 2.
			res, err := Replay(context.Background(), e.cfg, ReplayOptions{Source: main, From: 2, Into: fmt.Sprintf("bench-%d", i)})
			if err != nil || !res.Deterministic {
				b.Fatal(err, res)
			}
		}
		b.ReportMetric(float64((n-1)*b.N)/b.Elapsed().Seconds(), "mutations/s")
	})
}
