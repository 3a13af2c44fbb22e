package changelog_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/store"
)

// restoreTail is how many versions follow the checkpoint in
// BenchmarkRestore: what a restore from it reads of the changelog.
const restoreTail = 1000

// BenchmarkRestore restores one partition of the real broker's changelog
// into an empty store, from offset 0 and from the newest checkpoint (plus
// a tail of restoreTail versions), for several history lengths, in the
// same run. Each restore is checked against the changelog's state hashes
// (outside the timing). The histories are generated once per size and
// written directly as changelog records.
//
// ns/op is the time to usable: until the materializer returns, which is
// what the sequencer waits for before it decides (the check of the linked
// tables is handed over with Hooks.Checking and goes on in the
// background). ns-checked/op is the time until that check also passed.
//
//	go run ./internal/testenv/run -- go test -run '^$' -bench '^BenchmarkRestore$/^versions=(10000|1000000)$/' -benchtime 1x -count 3 -timeout 60m ./internal/changelog/
//	go run ./internal/testenv/run -- go test -run '^$' -bench '^BenchmarkRestore$/^versions=(10000|1000000)$/^from=checkpoint$' -benchtime 10x -count 3 -timeout 60m ./internal/changelog/
//
// The broker's first produces and fetches are slow (its JVM is cold), so a
// history of warmUp versions is produced and restored first, untimed;
// otherwise the smallest size, measured first, pays for it.
func BenchmarkRestore(b *testing.B) {
	const warmUp = 20_000
	w := newCheckpointEnv(b)
	w.produce(warmUp)
	w.materialize(w.store("warm-up"), nil)
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			// The history, restored once into the owner's store, which
			// takes the checkpoint; then the tail.
			e := newCheckpointEnv(b)
			e.produce(n - restoreTail)
			owner := e.store("owner")
			e.materialize(owner, nil)
			if _, err := e.bucket(owner, "").Take(context.Background(), 0, checkpoint.TakeOptions{TopicID: e.topicID(), Generation: -1}); err != nil {
				b.Fatal(err)
			}
			e.produce(restoreTail)
			for _, from := range []string{"0", "checkpoint"} {
				b.Run("from="+from, func(b *testing.B) {
					var toChecked time.Duration
					for i := range b.N {
						b.StopTimer()
						name := fmt.Sprintf("r-%s-%d-%d", from, b.N, i)
						st, err := store.Open(store.Config{Dir: filepath.Join(e.dir, name), Partitions: 1})
						if err != nil {
							b.Fatal(err)
						}
						var k *checkpoint.Bucket
						if from == "checkpoint" {
							k = e.bucket(st, "")
						}
						var check func(context.Context) error
						b.StartTimer()
						start := time.Now()
						r := e.restoreWith(st, k, func(cfg *changelog.MaterializerConfig) {
							cfg.Hooks.Checking = func(_ int32, c func(context.Context) error) { check = c }
						})
						b.StopTimer()
						if (from == "checkpoint") != (r.restored >= 0) {
							b.Fatalf("restored from offset %d", r.restored)
						}
						if check != nil {
							if err := check(context.Background()); err != nil {
								b.Fatal(err)
							}
						}
						toChecked += time.Since(start)
						got, err := canontest.StoreHeads(st, 0)
						if err != nil {
							b.Fatal(err)
						}
						if !maps.Equal(got, e.gen.Heads()) {
							b.Fatal("the restored store differs from the changelog")
						}
						_ = st.Close()
						_ = os.RemoveAll(filepath.Join(e.dir, name))
						b.StartTimer()
					}
					// ns/op is the time to usable; this the time until
					// the restored checkpoint also passed its check.
					b.ReportMetric(float64(toChecked.Nanoseconds())/float64(b.N), "ns-checked/op")
				})
			}
		})
	}
}
