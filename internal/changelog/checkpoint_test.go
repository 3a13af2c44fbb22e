package changelog_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob/fileblob"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/store"
)

// checkpointEnv is a changelog on the real broker written by a
// generator, a bucket, and stores to materialize it into.
type checkpointEnv struct {
	t       testing.TB
	dir     string
	brokers []string
	names   kafka.TopicNames
	txn     *kgo.Client
	gen     *canontest.ChangelogGen
}

func newCheckpointEnv(t testing.TB) *checkpointEnv {
	t.Helper()
	brokers, prefix, info := canontest.Topics(t, nil, 1)
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(prefix+"txn"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	return &checkpointEnv{t: t, dir: t.TempDir(), brokers: brokers, names: info.Names, txn: txn, gen: canontest.NewChangelogGen(3, 0, 1, 5)}
}

func (e *checkpointEnv) produce(n int) {
	e.t.Helper()
	canontest.ProduceChangelog(e.t, e.txn, e.names.Versions, 0, e.gen, n, 250)
}

func (e *checkpointEnv) store(name string) *store.Store {
	e.t.Helper()
	st, err := store.Open(store.Config{Dir: filepath.Join(e.dir, name), Partitions: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = st.Close() })
	return st
}

func (e *checkpointEnv) bucket(st *store.Store, prefix string) *checkpoint.Bucket {
	e.t.Helper()
	dir := filepath.Join(e.dir, "bucket")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	b, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := checkpoint.Open(context.Background(), checkpoint.Config{Bucket: b, Prefix: prefix, Store: st, Topic: e.names.Versions, TempDir: e.dir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return k
}

func (e *checkpointEnv) topicID() string {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	id, err := changelog.TopicID(context.Background(), kadm.NewClient(cl), e.names.Versions)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

type run struct {
	from     int64
	restored int64 // -1: none
	dropped  int
}

// materialize restores st up to the last stable offset, with checkpoints
// from k when it is set, and checks the state hashes against the
// changelog's.
func (e *checkpointEnv) materialize(st *store.Store, k *checkpoint.Bucket) run {
	e.t.Helper()
	r := e.restore(st, k)
	e.checkHeads(st)
	return r
}

// checkHeads checks st's heads and state hashes against the changelog's.
func (e *checkpointEnv) checkHeads(st *store.Store) {
	e.t.Helper()
	got, err := canontest.StoreHeads(st, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	if want := e.gen.Heads(); !maps.Equal(got, want) {
		e.t.Fatalf("the store's heads and state hashes differ from the changelog's:\n got %v\nwant %v", got, want)
	}
}

// restore restores st up to the last stable offset, with checkpoints
// from k when it is set.
func (e *checkpointEnv) restore(st *store.Store, k *checkpoint.Bucket) run {
	e.t.Helper()
	return e.restoreWith(st, k, nil)
}

// restoreWith is restore with the materializer's config changed by
// change (when not nil).
func (e *checkpointEnv) restoreWith(st *store.Store, k *checkpoint.Bucket, change func(*changelog.MaterializerConfig)) run {
	e.t.Helper()
	r := run{restored: -1}
	cfg := changelog.MaterializerConfig{
		Tail: changelog.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers}, Topics: e.names, Partitions: []int32{0}},
		Sink: st, Until: changelog.LastStable,
		Hooks: changelog.Hooks{
			Started:  func(from, _ map[int32]int64) { r.from = from[0] },
			Restored: func(_ int32, o int64) { r.restored = o },
			Dropped:  func(int32, error) { r.dropped++ },
		},
	}
	if k != nil {
		cfg.Checkpoints = k
	}
	if change != nil {
		change(&cfg)
	}
	m, err := changelog.NewMaterializer(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		e.t.Fatal(err)
	}
	return r
}

// TestRestoreIsCheckpointAndTail: on the real broker, a store restored
// with checkpoints starts from the newest checkpoint and reads only the
// tail after it, to the changelog's state hashes; a store that holds the
// partition nearly up to date reads its own short tail instead; a
// checkpoint the changelog's tail does not follow (a store of another
// history, same topic) is dropped and the partition rebuilt from the
// changelog's first record, never "recovered".
func TestRestoreIsCheckpointAndTail(t *testing.T) {
	e := newCheckpointEnv(t)
	e.produce(3000)
	owner := e.store("owner")
	if r := e.materialize(owner, nil); r.from != 0 {
		t.Fatalf("the owner started at %d, want 0", r.from)
	}
	ob := e.bucket(owner, "")
	m, err := ob.Take(context.Background(), 0, checkpoint.TakeOptions{TopicID: e.topicID(), Generation: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.produce(400)

	fresh := e.store("fresh")
	r := e.materialize(fresh, e.bucket(fresh, ""))
	if r.restored != m.Offset || r.from != m.Offset {
		t.Fatalf("fresh store: restored %d, started at %d; want both at the checkpoint's offset %d", r.restored, r.from, m.Offset)
	}
	// The owner, a short tail behind the checkpoint: its own tail.
	if r := e.materialize(owner, ob); r.restored != -1 || r.from != m.Offset {
		t.Fatalf("owner: restored %d, started at %d; want no restore, from its offset %d", r.restored, r.from, m.Offset)
	}

	// A store of another history, checkpointed under another prefix as
	// if it were this topic's.
	bogus := e.store("bogus")
	other := canontest.NewChangelogGen(99, 0, 1, 5)
	var next int64
	for range 200 {
		recs := other.Next()
		next += int64(len(recs)) + 1
		if err := bogus.Apply(0, recs, next); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.bucket(bogus, "bogus/").Take(context.Background(), 0, checkpoint.TakeOptions{TopicID: e.topicID(), Generation: -1}); err != nil {
		t.Fatal(err)
	}
	victim := e.store("victim")
	r = e.materialize(victim, e.bucket(victim, "bogus/"))
	if r.restored != next || r.dropped != 1 || r.from != 0 {
		t.Fatalf("bogus checkpoint: restored %d, dropped %d, last start %d; want restored %d, dropped once, rebuilt from 0", r.restored, r.dropped, r.from, next)
	}
}

// TestRestoreFindsACorruptTableAfterItsIngest: on the real broker, a
// checkpoint whose table is corrupt in a local bucket (one byte changed,
// the size kept) is ingested before its check ends (the check runs while
// the tail is read), found corrupt before the restore returns, dropped,
// and the partition rebuilt from the changelog's first record.
func TestRestoreFindsACorruptTableAfterItsIngest(t *testing.T) {
	e := newCheckpointEnv(t)
	e.produce(2000)
	owner := e.store("owner")
	e.materialize(owner, nil)
	m, err := e.bucket(owner, "").Take(context.Background(), 0, checkpoint.TakeOptions{TopicID: e.topicID(), Generation: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.produce(300)

	// The largest file of the bucket is a table; replace it (as fileblob
	// does) by a copy with one byte changed in its middle.
	var largest string
	var size int64
	err = filepath.WalkDir(filepath.Join(e.dir, "bucket"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil && info.Size() > size {
			largest, size = path, info.Size()
		}
		return nil
	})
	if err != nil || largest == "" {
		t.Fatalf("no table in the bucket: %v", err)
	}
	canontest.CorruptFile(t, largest)

	fresh := e.store("fresh")
	r := e.materialize(fresh, e.bucket(fresh, ""))
	if r.restored != m.Offset || r.dropped != 1 || r.from != 0 {
		t.Fatalf("corrupt table: restored %d, dropped %d, last start %d; want restored %d (ingested before its check ended), dropped once, rebuilt from 0",
			r.restored, r.dropped, r.from, m.Offset)
	}
}

// corruptObject replaces the bucket's object of file f (as fileblob
// replaces objects) by a copy with one byte changed in its middle, in a
// data block of the table, its size kept.
func (e *checkpointEnv) corruptObject(f checkpoint.File) {
	e.t.Helper()
	canontest.CorruptFile(e.t, filepath.Join(e.dir, "bucket", filepath.FromSlash(checkpoint.DefaultPrefix+"files/"+f.SHA256)))
}

// twoCheckpoints writes a history with two checkpoints of it and a tail,
// and corrupts the largest table that only the newer one holds. It
// returns both manifests.
func (e *checkpointEnv) twoCheckpoints() (older, newer *checkpoint.Manifest) {
	e.t.Helper()
	e.produce(1500)
	owner := e.store("owner")
	ob := e.bucket(owner, "")
	take := func() *checkpoint.Manifest {
		e.materialize(owner, nil)
		m, err := ob.Take(context.Background(), 0, checkpoint.TakeOptions{TopicID: e.topicID(), Generation: -1})
		if err != nil {
			e.t.Fatal(err)
		}
		return m
	}
	older = take()
	e.produce(600)
	newer = take()
	e.produce(50)
	e.corruptObject(canontest.LargestOwnFile(e.t, newer, older))
	return older, newer
}

// TestRestoreHandsTheCheckToItsCaller: on the real broker, a bounded
// restore with Hooks.Checking returns as soon as the tail is read, with
// the check of the restored checkpoint (one byte changed in a data block
// of its largest table) handed to the caller; the check fails after the
// restore returned; the caller drops the partition and restores again,
// and the same bucket skips the corrupt checkpoint for the older one:
// the state hashes are the changelog's.
func TestRestoreHandsTheCheckToItsCaller(t *testing.T) {
	e := newCheckpointEnv(t)
	older, newer := e.twoCheckpoints()

	fresh := e.store("fresh")
	k := e.bucket(fresh, "")
	checks := map[int32]func(context.Context) error{}
	r := e.restoreWith(fresh, k, func(cfg *changelog.MaterializerConfig) {
		cfg.Hooks.Checking = func(p int32, check func(context.Context) error) { checks[p] = check }
	})
	if r.restored != newer.Offset || r.dropped != 0 || len(checks) != 1 || checks[0] == nil {
		t.Fatalf("restored %d, dropped %d, checks handed over %d; want restored %d, none dropped, the check of partition 0 handed over",
			r.restored, r.dropped, len(checks), newer.Offset)
	}
	err := checks[0](context.Background())
	if !errors.Is(err, checkpoint.ErrInvalid) {
		t.Fatalf("the check of a corrupt table answered %v, want checkpoint.ErrInvalid", err)
	}
	if err := fresh.DropPartition(0); err != nil {
		t.Fatal(err)
	}
	r = e.restoreWith(fresh, k, func(cfg *changelog.MaterializerConfig) {
		cfg.Hooks.Checking = func(p int32, check func(context.Context) error) { checks[p] = check }
	})
	if r.restored != older.Offset || r.from != older.Offset {
		t.Fatalf("after the drop: restored %d, started at %d; want the older checkpoint's offset %d (the newer one is known corrupt)",
			r.restored, r.from, older.Offset)
	}
	if err := checks[0](context.Background()); err != nil {
		t.Fatalf("the older checkpoint's check: %v", err)
	}
	e.checkHeads(fresh)
}

// TestFollowerDropsACorruptCheckpointWhileReading: on the real broker, a
// Forever materializer (a read replica, a standby) restores a checkpoint
// whose table is corrupt, reads on while the check runs, learns of the
// failed check between polls, drops the partition and restores it again
// from the older checkpoint: its state hashes are then the changelog's.
func TestFollowerDropsACorruptCheckpointWhileReading(t *testing.T) {
	e := newCheckpointEnv(t)
	older, newer := e.twoCheckpoints()

	fresh := e.store("fresh")
	var (
		mu              sync.Mutex
		restored        = int64(-1)
		dropped         int
		from, target    int64
		caughtUpRebuilt = make(chan struct{})
	)
	cfg := changelog.MaterializerConfig{
		Tail: changelog.Config{Kafka: kafka.ClientConfig{Brokers: e.brokers}, Topics: e.names, Partitions: []int32{0}},
		Sink: fresh, Until: changelog.Forever, Checkpoints: e.bucket(fresh, ""),
		Hooks: changelog.Hooks{
			Restored: func(_ int32, o int64) { mu.Lock(); restored = o; mu.Unlock() },
			Dropped: func(_ int32, err error) {
				if !errors.Is(err, changelog.ErrCorruptCheckpoint) {
					t.Errorf("dropped for %v, want changelog.ErrCorruptCheckpoint", err)
				}
				mu.Lock()
				dropped++
				mu.Unlock()
			},
			Started: func(f, t map[int32]int64) {
				mu.Lock()
				from, target = f[0], t[0]
				mu.Unlock()
			},
			Applied: func(_ int32, next int64, _ int, _ int64) {
				mu.Lock()
				defer mu.Unlock()
				if dropped > 0 && next >= target {
					select {
					case <-caughtUpRebuilt:
					default:
						close(caughtUpRebuilt)
					}
				}
			},
		},
	}
	m, err := changelog.NewMaterializer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-caughtUpRebuilt:
	case err := <-done:
		t.Fatalf("the follower stopped: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("the follower did not rebuild the partition within 5 minutes")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the follower ended with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if restored != older.Offset || dropped != 1 || from != older.Offset {
		t.Fatalf("last restored %d, dropped %d, last start %d; want the newer checkpoint (%d) dropped once after its check failed, then the older one restored (%d)",
			restored, dropped, from, newer.Offset, older.Offset)
	}
	e.checkHeads(fresh)
}
