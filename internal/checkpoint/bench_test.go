package checkpoint_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/store"
)

// benchMore is how many versions follow the first checkpoint of
// BenchmarkCheckpoint before the second one.
const benchMore = 10_000

// benchOwner is a store of one partition with a generated history, and
// its two checkpoints' figures (made once per history length and reused
// by every count: 1M versions take minutes to write).
type benchOwner struct {
	dir   string
	st    *store.Store
	gen   *canontest.ChangelogGen
	next  int64
	heads map[string]string // after the second checkpoint's versions
	// figures of the first two checkpoints, measured in the first run
	figures map[string]float64
}

var (
	benchOwnersMu sync.Mutex
	benchOwners   = map[int]*benchOwner{}
)

// owner returns the store with n versions, then benchMore more applied
// by more (called between the checkpoints).
func benchOwnerOf(b *testing.B, n int) *benchOwner {
	benchOwnersMu.Lock()
	defer benchOwnersMu.Unlock()
	if o := benchOwners[n]; o != nil {
		return o
	}
	dir, err := os.MkdirTemp("", "canon-bench-checkpoint-")
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "owner"), Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	o := &benchOwner{dir: dir, st: st, gen: canontest.NewChangelogGen(3, 0, 1, 5)}
	o.apply(b, n)
	benchOwners[n] = o
	return o
}

// apply writes n versions, 250 to a changelog transaction as
// ProduceChangelog does, each with its own offsets.
func (o *benchOwner) apply(b *testing.B, n int) {
	for n > 0 {
		var recs []store.Record
		for range min(n, 250) {
			r := o.gen.Next()
			recs = append(recs, r...)
			o.next += int64(len(r))
			n--
		}
		o.next++ // the commit marker
		if err := o.st.Apply(0, recs, o.next); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpoint takes a checkpoint of a partition with a history of
// n versions, applies benchMore more, takes a second one, and restores
// the second one into an empty store (the timed part; no changelog tail:
// BenchmarkRestore in internal/changelog has that). Both buckets: a
// directory (file://) and the test environment's S3 server (skipped
// outside it). Besides the restore's time per op it reports:
//
//	take-s             time of a Take into the run's empty bucket (export, hash, upload all)
//	take2-s            time of the second Take (file://, first run), which reuses files
//	up1-MB, up2-MB     bytes the first and the second checkpoint uploaded
//	files2, new2       files of the second checkpoint, and how many of them are new
//
// Run it as:
//
//	go run ./internal/testenv/run -- go test -run '^$' -bench '^BenchmarkCheckpoint$' -benchtime 3x -timeout 60m ./internal/checkpoint/
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			for _, kind := range []string{"file", "s3"} {
				b.Run("bucket="+kind, func(b *testing.B) {
					benchCheckpoint(b, n, kind)
				})
			}
		})
	}
}

func benchCheckpoint(b *testing.B, n int, kind string) {
	ctx := context.Background()
	var bucket *blob.Bucket
	if kind == "s3" {
		s3 := testenv.NewS3(b)
		sb, err := blob.OpenBucket(ctx, s3.URL())
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		bucket = blob.PrefixedBucket(sb, s3.Prefix(b))
	} else {
		dir := b.TempDir()
		fb, err := fileblob.OpenBucket(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		bucket = fb
	}
	defer bucket.Close()
	b.StopTimer()
	o := benchOwnerOf(b, n)
	tmp := b.TempDir()
	var log *slog.Logger // -v: what Take and Restore log, with their phases
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	openPrefix := func(st *store.Store, prefix string) *checkpoint.Bucket {
		k, err := checkpoint.Open(ctx, checkpoint.Config{Bucket: bucket, Prefix: prefix, Store: st, Topic: topic, TempDir: tmp, Log: log})
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	open := func(st *store.Store) *checkpoint.Bucket { return openPrefix(st, "") }
	k := openPrefix(o.st, "pair/") // the first run's two checkpoints
	take := func() (*checkpoint.Manifest, time.Duration) {
		start := time.Now()
		m, err := k.Take(ctx, 0, checkpoint.TakeOptions{TopicID: topicID, Generation: -1})
		if err != nil || m == nil {
			b.Fatalf("Take = %v, %v", m, err)
		}
		return m, time.Since(start)
	}
	if o.heads == nil {
		// The first run of this history length (on the file:// bucket):
		// a checkpoint, benchMore versions, a second one; what the
		// second uploaded is kept for the runs after it, which find the
		// owner after the benchMore versions.
		m1, _ := take()
		o.apply(b, benchMore)
		o.heads = o.gen.Heads()
		m2, t2 := take()
		in1 := distinct(m1)
		var up1, up2 int64
		var new2 int
		for _, f := range m1.Files {
			up1 += f.Size
		}
		for _, f := range m2.Files {
			if !in1[f.SHA256] {
				up2 += f.Size
				new2++
			}
		}
		o.figures = map[string]float64{"take2-s": t2.Seconds(), "up1-MB": float64(up1) / 1e6,
			"up2-MB": float64(up2) / 1e6, "files2": float64(len(m2.Files)), "new2": float64(new2)}
	}
	for unit, v := range o.figures {
		b.ReportMetric(v, unit)
	}
	// A checkpoint into this run's empty bucket (its default prefix):
	// everything uploaded. It is the one restored.
	k = open(o.st)
	m2, t := take()
	b.ReportMetric(t.Seconds(), "take-s")

	for i := range b.N {
		st, err := store.Open(store.Config{Dir: filepath.Join(tmp, fmt.Sprintf("r%d", i)), Partitions: 1})
		if err != nil {
			b.Fatal(err)
		}
		r := open(st)
		b.StartTimer()
		off, ok, err := r.Restore(ctx, 0, topicID, -1, m2.Offset)
		b.StopTimer()
		if err != nil || !ok || off != m2.Offset {
			b.Fatalf("Restore = %d, %v, %v; want offset %d", off, ok, err, m2.Offset)
		}
		got, err := canontest.StoreHeads(st, 0)
		if err != nil {
			b.Fatal(err)
		}
		if !maps.Equal(got, o.heads) {
			b.Fatal("the restored store differs from the owner's")
		}
		_ = st.Close()
		_ = os.RemoveAll(filepath.Join(tmp, fmt.Sprintf("r%d", i)))
	}
}
