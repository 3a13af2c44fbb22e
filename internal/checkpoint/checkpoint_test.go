package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/store"
)

const (
	parts   = 4
	part    = int32(1)
	topic   = "canon.versions"
	topicID = "0123456789abcdef0123456789abcdef"
)

// fixture is an owner's store fed by a changelog generator, and a bucket.
type fixture struct {
	t      *testing.T
	dir    string
	gen    *canontest.ChangelogGen
	st     *store.Store
	bucket *blob.Bucket
	next   int64 // the partition's next changelog offset
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := fileblob.OpenBucket(filepath.Join(dir, "bucket"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	f := &fixture{t: t, dir: dir, gen: canontest.NewChangelogGen(1, part, parts, 5), bucket: b}
	f.st = f.openStore("owner")
	// Another partition's data shares the store's files.
	other := canontest.NewChangelogGen(2, 0, parts, 3)
	for i := range 500 {
		if err := f.st.Apply(0, other.Next(), int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) openStore(name string) *store.Store {
	f.t.Helper()
	st, err := store.Open(store.Config{Dir: filepath.Join(f.dir, name), Partitions: parts})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = st.Close() })
	return st
}

// write applies n versions, each as if at its own changelog offsets.
func (f *fixture) write(n int) {
	f.t.Helper()
	for range n {
		recs := f.gen.Next()
		f.next += int64(len(recs)) + 1 // and a commit marker
		if err := f.st.Apply(part, recs, f.next); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) open(cfg checkpoint.Config) *checkpoint.Bucket {
	f.t.Helper()
	cfg.Bucket, cfg.Topic, cfg.TempDir = f.bucket, topic, f.dir
	if cfg.Store == nil {
		cfg.Store = f.st
	}
	k, err := checkpoint.Open(context.Background(), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return k
}

func (f *fixture) take(k *checkpoint.Bucket) *checkpoint.Manifest {
	f.t.Helper()
	m, err := k.Take(context.Background(), part, checkpoint.TakeOptions{TopicID: topicID, Generation: 1})
	if err != nil || m == nil {
		f.t.Fatalf("Take = %v, %v", m, err)
	}
	if m.Offset != f.next {
		f.t.Fatalf("checkpoint offset %d, the store's is %d", m.Offset, f.next)
	}
	return m
}

// restore restores the partition into a new store and checks that it
// holds exactly the changelog's state at offset want (heads).
func (f *fixture) restore(name string, id string, upTo int64, wantOffset int64, want map[string]string) {
	f.t.Helper()
	st := f.openStore(name)
	k := f.open(checkpoint.Config{Store: st})
	o, ok, err := k.Restore(context.Background(), part, id, -1, upTo)
	if err != nil {
		f.t.Fatal(err)
	}
	if want == nil {
		if ok {
			f.t.Fatalf("restored offset %d, want no usable checkpoint", o)
		}
		return
	}
	if !ok || o != wantOffset {
		f.t.Fatalf("restored = %d, %v; want offset %d", o, ok, wantOffset)
	}
	got, err := canontest.StoreHeads(st, part)
	if err != nil {
		f.t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		f.t.Fatalf("restored heads differ from the changelog's:\n got %v\nwant %v", got, want)
	}
	if so, _, _ := st.Offset(part); so != wantOffset {
		f.t.Fatalf("store offset after restore %d, want %d", so, wantOffset)
	}
}

func (f *fixture) objects(prefix string) []string {
	f.t.Helper()
	var keys []string
	it := f.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(context.Background())
		if err != nil {
			break
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestTakeAndRestore: checkpoints upload only new files; a restore into
// an empty store holds exactly the changelog's state at the checkpoint.
func TestTakeAndRestore(t *testing.T) {
	f := newFixture(t)
	k := f.open(checkpoint.Config{})
	f.write(3000)
	m1 := f.take(k)
	heads1 := f.gen.Heads()
	files1 := len(f.objects("canon/files/"))
	if want := len(distinct(m1)); files1 != want {
		t.Fatalf("%d files in the bucket after the first checkpoint of %d distinct files", files1, want)
	}
	f.write(50)
	m2 := f.take(k)
	heads2 := f.gen.Heads()
	in1, in2 := distinct(m1), distinct(m2)
	shared := 0
	for sum := range in2 {
		if in1[sum] {
			shared++
		}
	}
	if got := len(f.objects("canon/files/")); got != files1+len(in2)-shared {
		t.Fatalf("%d files after two checkpoints; want %d + %d new", got, files1, len(in2)-shared)
	}
	t.Logf("first checkpoint %d files, second %d, %d of them reused", len(m1.Files), len(m2.Files), shared)
	f.restore("r2", topicID, f.next, m2.Offset, heads2)
	// A restore bounded below the newest takes the older one.
	f.restore("r1", topicID, m2.Offset-1, m1.Offset, heads1)
}

// TestRestoreSkipsInvalid: a truncated or corrupt file, a deleted or
// undecodable manifest, another topic incarnation and a checkpoint beyond
// the changelog are each skipped for an older checkpoint, or for none.
func TestRestoreSkipsInvalid(t *testing.T) {
	f := newFixture(t)
	k := f.open(checkpoint.Config{})
	var ms []*checkpoint.Manifest
	var heads []map[string]string
	for range 3 {
		f.write(700)
		ms = append(ms, f.take(k))
		heads = append(heads, f.gen.Heads())
	}
	ctx := context.Background()
	path := func(fl checkpoint.File) string { return filepath.Join(f.dir, "bucket", "canon", "files", fl.SHA256) }

	// Another incarnation of the topic: nothing is usable.
	f.restore("other-topic", "ffffffffffffffffffffffffffffffff", f.next, 0, nil)
	// A changelog that ends before every checkpoint (recreated): none.
	f.restore("beyond", topicID, ms[0].Offset-1, 0, nil)

	// A corrupt file of the newest: the middle one.
	fl := canontest.LargestOwnFile(t, ms[2], ms[1], ms[0])
	canontest.CorruptFile(t, path(fl))
	f.restore("corrupt", topicID, f.next, ms[1].Offset, heads[1])

	// The middle one truncated too: the oldest.
	fl = canontest.LargestOwnFile(t, ms[1], ms[0])
	if err := os.Truncate(path(fl), fl.Size/2); err != nil {
		t.Fatal(err)
	}
	f.restore("truncated", topicID, f.next, ms[0].Offset, heads[0])

	// A deleted file of the oldest: none is usable, nothing restored.
	if err := os.Remove(path(canontest.LargestOwnFile(t, ms[0]))); err != nil {
		t.Fatal(err)
	}
	f.restore("missing", topicID, f.next, 0, nil)

	// A fresh checkpoint; then its manifest deleted, and an undecodable
	// manifest with a higher offset: both skipped, the fresh one's files
	// alone are not a checkpoint.
	f.write(100)
	m4 := f.take(k)
	heads4 := f.gen.Heads()
	f.write(100)
	m5 := f.take(k)
	heads5 := f.gen.Heads()
	f.restore("fresh", topicID, f.next, m5.Offset, heads5)
	keys := f.objects("canon/manifests/")
	var m5key string
	for _, key := range keys {
		if strings.Contains(key, "/"+pad(m5.Offset)+"-") {
			m5key = key
		}
	}
	if err := f.bucket.Delete(ctx, m5key); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(m5key, pad(m5.Offset), pad(m5.Offset+1), 1)
	if err := f.bucket.WriteAll(ctx, bad, []byte(`{"format":1,"topic":"canon.versions","files":[{"na`), nil); err != nil {
		t.Fatal(err)
	}
	f.restore("deleted-manifest", topicID, f.next, m4.Offset, heads4)
}

func pad(o int64) string { return fmt.Sprintf("%020d", o) }

func distinct(m *checkpoint.Manifest) map[string]bool {
	out := map[string]bool{}
	for _, fl := range m.Files {
		out[fl.SHA256] = true
	}
	return out
}

// TestCrashDuringUpload: a checkpoint that stops after its files, before
// its manifest, is invisible to restores; its files are swept once they
// have been unreferenced for the grace period, and the files of the
// retained checkpoints are not.
func TestCrashDuringUpload(t *testing.T) {
	f := newFixture(t)
	const grace = 300 * time.Millisecond
	k := f.open(checkpoint.Config{Grace: grace})
	f.write(1500)
	m1 := f.take(k)
	heads1 := f.gen.Heads()
	f.write(1500)
	opts := checkpoint.TakeOptions{TopicID: topicID}
	crash := errors.New("crash")
	opts.SetBeforeManifest(func() error { return crash })
	if _, err := k.Take(context.Background(), part, opts); !errors.Is(err, crash) {
		t.Fatalf("Take = %v, want the crash", err)
	}
	before := len(f.objects("canon/files/"))
	if before <= len(distinct(m1)) {
		t.Fatalf("the crashed checkpoint uploaded nothing (%d files)", before)
	}
	f.restore("after-crash", topicID, f.next, m1.Offset, heads1)

	// A new process sweeps: the first sweep only notes the orphans.
	sweeper := f.open(checkpoint.Config{Grace: grace})
	if n, err := sweeper.Sweep(context.Background()); err != nil || n != 0 {
		t.Fatalf("first Sweep = %d, %v; want nothing deleted", n, err)
	}
	time.Sleep(grace + 50*time.Millisecond) // the grace period is wall time
	n, err := sweeper.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(f.objects("canon/files/")); n != before-len(distinct(m1)) || got != len(distinct(m1)) {
		t.Fatalf("swept %d, %d files left; want the %d orphans swept and the %d of the checkpoint kept", n, got, before-len(distinct(m1)), len(distinct(m1)))
	}
	f.restore("after-sweep", topicID, f.next, m1.Offset, heads1)
}

// TestZombieCannotReplace: after a rebalance, the old owner (a zombie
// that has not noticed) writes a checkpoint of its older store after the
// new owner wrote a newer one. The zombie's manifest is a separate,
// older checkpoint; the newer one stays and is what restores use. Even
// at the same offset a manifest is never overwritten.
func TestZombieCannotReplace(t *testing.T) {
	f := newFixture(t)
	f.write(1000)
	zombieStore := f.st
	zombieNext := f.next
	zombie := f.open(checkpoint.Config{})
	// The new owner: restored from the zombie's state and further.
	owner := f.openStore("new-owner")
	base := f.take(zombie)
	ownerBucket := f.open(checkpoint.Config{Store: owner})
	if _, ok, err := ownerBucket.Restore(context.Background(), part, topicID, -1, f.next); err != nil || !ok {
		t.Fatalf("new owner's restore: %v, %v", ok, err)
	}
	// At the same offset, the newer owner's generation wins whatever
	// the writer ids (and 10 is above 9 as a number, not as text).
	ctx := context.Background()
	atBase, err := ownerBucket.Take(ctx, part, checkpoint.TakeOptions{TopicID: topicID, Generation: 10})
	if err != nil || atBase.Offset != zombieNext {
		t.Fatalf("new owner's Take after its restore = %v, %v", atBase, err)
	}
	late := f.open(checkpoint.Config{Store: zombieStore})
	if _, err := late.Take(ctx, part, checkpoint.TakeOptions{TopicID: topicID, Generation: 9}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []*checkpoint.Bucket{late, f.open(checkpoint.Config{Store: f.openStore("reader")})} {
		if m, err := k.Newest(ctx, part); err != nil || m.Generation != 10 || m.Writer != atBase.Writer {
			t.Fatalf("Newest = %+v, %v; want the new owner's of generation 10", m, err)
		}
	}
	f.st = owner
	f.write(500)
	newer := f.take(ownerBucket)
	heads := f.gen.Heads()

	// The zombie's late checkpoint, at its older offset: in the same
	// generation its name is the base's, which is not overwritten; a
	// restarted zombie process writes one of its own.
	if _, err := zombie.Take(context.Background(), part, checkpoint.TakeOptions{TopicID: topicID, Generation: 1}); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("zombie Take over its own manifest = %v; want ErrExists", err)
	}
	zombie2 := f.open(checkpoint.Config{Store: zombieStore})
	if m, err := zombie2.Take(context.Background(), part, checkpoint.TakeOptions{TopicID: topicID, Generation: 1}); err != nil || m.Offset != zombieNext {
		t.Fatalf("restarted zombie Take = %v, %v", m, err)
	}
	if got := len(f.objects("canon/manifests/")); got != 5 {
		t.Fatalf("%d manifests; want 5 (base, the new owner's two, the zombie's two)", got)
	}
	m, err := ownerBucket.Newest(context.Background(), part)
	if err != nil || m.Offset != newer.Offset {
		t.Fatalf("Newest = %v, %v; want offset %d", m, err, newer.Offset)
	}
	f.restore("after-zombie", topicID, f.next, newer.Offset, heads)
	if base.Offset != zombieNext {
		t.Fatalf("base at %d, zombie at %d", base.Offset, zombieNext)
	}
}

// TestRetention: the Keep newest manifests stay; older ones go once they
// have been out of them for the grace period, then their files.
func TestRetention(t *testing.T) {
	f := newFixture(t)
	const grace = time.Hour
	var skew atomic.Int64
	cfg := checkpoint.Config{Keep: 2, Grace: grace}
	cfg.SetClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	k := f.open(cfg)
	var ms []*checkpoint.Manifest
	for range 4 {
		f.write(800)
		ms = append(ms, f.take(k))
	}
	heads := f.gen.Heads()
	ctx := context.Background()
	if n, err := k.Retain(ctx, part); err != nil || n != 0 {
		t.Fatalf("Retain within the grace period = %d, %v; want nothing deleted", n, err)
	}
	if n, err := k.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing deleted", n, err)
	}
	skew.Store(int64(grace + time.Minute))
	if n, err := k.Retain(ctx, part); err != nil || n != 2 {
		t.Fatalf("Retain = %d, %v; want the 2 oldest deleted", n, err)
	}
	if n, err := k.Sweep(ctx); err != nil || n != 0 { // notes the newly unreferenced files
		t.Fatalf("first Sweep after Retain = %d, %v; want nothing deleted yet", n, err)
	}
	skew.Store(int64(2*grace + 2*time.Minute))
	if _, err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, m := range ms[2:] {
		maps.Copy(want, distinct(m))
	}
	got := map[string]bool{}
	for _, key := range f.objects("canon/files/") {
		got[filepath.Base(key)] = true
	}
	if !maps.Equal(got, want) {
		t.Fatalf("files left %d, want exactly the %d of the 2 retained checkpoints", len(got), len(want))
	}
	f.restore("retained", topicID, f.next, ms[3].Offset, heads)
}

// TestRestoreLinksLocalFiles: a restore from a directory bucket on the
// store's file system hard-links the bucket's files into the store
// rather than copying them (each is still checked against its SHA-256:
// TestRestoreSkipsInvalid corrupts them), and a manifest that names one
// file twice is skipped.
func TestRestoreLinksLocalFiles(t *testing.T) {
	f := newFixture(t)
	k := f.open(checkpoint.Config{})
	f.write(2000)
	m := f.take(k)
	heads := f.gen.Heads()
	f.restore("linked", topicID, f.next, m.Offset, heads)
	tables, err := filepath.Glob(filepath.Join(f.dir, "linked", "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range m.Files {
		obj, err := os.Stat(filepath.Join(f.dir, "bucket", "canon", "files", fl.SHA256))
		if err != nil {
			t.Fatal(err)
		}
		linked := false
		for _, tb := range tables {
			if st, err := os.Stat(tb); err == nil && os.SameFile(obj, st) {
				linked = true
			}
		}
		if !linked {
			t.Errorf("file %s of the checkpoint is not linked into the restored store", fl.Name)
		}
	}

	// A manifest at a higher offset that names a file twice: skipped.
	var key string
	for _, o := range f.objects("canon/manifests/") {
		if strings.Contains(o, "/"+pad(m.Offset)+"-") {
			key = o
		}
	}
	dup := *m
	dup.Offset++
	dup.Files = append(slices.Clone(m.Files), m.Files[0])
	data, err := json.Marshal(&dup)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.bucket.WriteAll(context.Background(), strings.Replace(key, pad(m.Offset), pad(dup.Offset), 1), data, nil); err != nil {
		t.Fatal(err)
	}
	f.restore("duplicate", topicID, f.next+1, m.Offset, heads)

	// m's manifest replaced by one whose CRC-32C of a file is wrong (a
	// higher generation at m's offset): nothing is restored (the check is
	// the CRC-32C). Then one without CRC-32Cs (earlier versions):
	// restored, checked by SHA-256.
	ctx := context.Background()
	if err := f.bucket.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	write := func(gen int32, writer string, files []checkpoint.File) {
		t.Helper()
		c := *m
		c.Generation, c.Writer, c.Files = gen, writer, files
		data, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		name := key[:strings.LastIndexByte(key, '/')+1] + fmt.Sprintf("%020d-g%010d-%s.json", c.Offset, gen, writer)
		if err := f.bucket.WriteAll(ctx, name, data, nil); err != nil {
			t.Fatal(err)
		}
	}
	badCRC := slices.Clone(m.Files)
	badCRC[0].CRC32C = "00000000"
	if m.Files[0].CRC32C == badCRC[0].CRC32C || m.Files[0].CRC32C == "" {
		t.Fatalf("the checkpoint's CRC-32C is %q", m.Files[0].CRC32C)
	}
	write(m.Generation+1, "badcrc", badCRC)
	f.restore("bad-crc", topicID, m.Offset, 0, nil)
	noCRC := slices.Clone(m.Files)
	for i := range noCRC {
		noCRC[i].CRC32C = ""
	}
	write(m.Generation+2, "nocrc", noCRC)
	f.restore("no-crc", topicID, m.Offset, m.Offset, heads)
}
