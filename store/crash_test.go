package store

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/canon-sync/canon/schemas"
)

// The crash tests apply a random changelog to a store on Pebble's
// crashable in-memory file system and take crash clones of it: at
// random file system operations of Pebble (inside Apply: before and after
// the WAL write, before the sync; and in background flushes and
// compactions), and from another goroutine while an Apply is in flight.
// Each clone keeps what was synced and a random part of what was not. The
// store reopened on a clone must hold exactly the state after some Apply
// that had started, at least the last one that had returned, byte for
// byte, and its offset must match its data; and it must catch up from its
// offset to the same end state as the store that did not crash.

type changelogBatch struct {
	recs []Record
	next int64 // the partition's next offset after the batch
}

// crashChangelog makes n batches of 1-3 versions of three projects of
// partition 0, on several branches (some made from older versions), with
// puts, overwrites that share chunks, deletions and scalars.
func crashChangelog(rng *rand.Rand, n int) []changelogBatch {
	var projects []*projectModel
	for i := range 3 {
		projects = append(projects, newProject(testOrg, projectIn(0, testPartitions, i)))
	}
	var out []changelogBatch
	offset := int64(0)
	client := uint64(0)
	for range n {
		var recs []Record
		for range 1 + rng.IntN(3) {
			pm := projects[rng.IntN(len(projects))]
			var names []string
			for name := range pm.branches {
				names = append(names, name)
			}
			var vb *versionBuilder
			switch {
			case len(names) == 0:
				vb = pm.next("main")
			case len(names) < 4 && rng.IntN(8) == 0:
				from := names[rng.IntN(len(names))]
				head := pm.branches[from].head()
				vb = pm.fork(fmt.Sprintf("b%d", len(names)), from, 1+uint64(rng.IntN(int(head))))
			default:
				vb = pm.next(names[rng.IntN(len(names))])
			}
			items := vb.st.items
			for range 1 + rng.IntN(3) {
				k := cid{[]string{"notes", "tags"}[rng.IntN(2)], fmt.Sprintf("i%d", rng.IntN(8))}
				old, exists := items[k]
				switch {
				case exists && rng.IntN(4) == 0:
					vb.del(k.collection, k.id)
				case exists && rng.IntN(2) == 0:
					// An edit at the end: the body shares its first chunks.
					vb.put(k.collection, k.id, string(old.Meta), string(pm.bodies[old.Hash])+randText(rng, 1+rng.IntN(20)))
				default:
					vb.put(k.collection, k.id, fmt.Sprintf(`{"n":%d}`, rng.IntN(3)), randText(rng, rng.IntN(120)))
				}
			}
			if rng.IntN(3) == 0 {
				vb.scalar("title", fmt.Sprintf(`"t%d"`, rng.IntN(100)))
			}
			client++
			vb.mutation(fmt.Sprintf("c%d", client%5), client, schemas.StatusApplied, "")
			recs = append(recs, vb.commit()...)
		}
		offset += int64(len(recs))
		if rng.IntN(3) == 0 {
			offset++ // a transaction marker
		}
		out = append(out, changelogBatch{recs: recs, next: offset})
	}
	return out
}

func randText(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b strings.Builder
	for range n {
		b.WriteByte(letters[rng.IntN(len(letters))])
	}
	return b.String()
}

// crashClone is a crash image and the Applies it may reflect: those up to
// done have returned, those after started had not begun (-1: none).
type crashClone struct {
	fs            *vfs.MemFS
	done, started int
}

// crashFixture applies a changelog and records the exact partition
// contents after each Apply.
type crashFixture struct {
	batches []changelogBatch
	// scans[i+1] is partition 0 after batch i; scans[0] is empty.
	scans [][]kv
	// done and started are the last Apply that returned and the last one
	// that began.
	done, started atomic.Int64
	// noSync opens the store with Config.NoSync: an Apply that returned
	// may be lost in a crash, with every Apply after it.
	noSync bool
	// lost counts the crashes that lost an Apply that had returned.
	lost int
}

func newCrashFixture(seed uint64, n int, noSync bool) *crashFixture {
	f := &crashFixture{batches: crashChangelog(rand.New(rand.NewPCG(seed, 1)), n), scans: [][]kv{nil}, noSync: noSync}
	f.done.Store(-1)
	f.started.Store(-1)
	return f
}

func smallMemtables(o *pebble.Options) {
	o.MemTableSize = 64 << 10
	o.L0CompactionThreshold = 2
}

func (f *crashFixture) open(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "db", FS: fs, Partitions: testPartitions, Logger: quiet, pebbleOptions: smallMemtables, NoSync: f.noSync})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *crashFixture) apply(t *testing.T, s *Store, i int) {
	t.Helper()
	f.started.Store(int64(i))
	mustApply(t, s, 0, f.batches[i].recs, f.batches[i].next)
	f.done.Store(int64(i))
}

// check reopens a crash clone and verifies it, then lets it catch up from
// its offset when catchUp is set. The clone must hold exactly the Applies
// up to one of those that may have been kept, with that one's offset: with
// syncing, every Apply that returned and maybe the one running; without,
// any prefix of them (a lost suffix, which it must then catch up on from
// the offset, whatever catchUp says).
func (f *crashFixture) check(t *testing.T, c crashClone, catchUp bool) (applied int) {
	t.Helper()
	s := f.open(t, c.fs)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	got := scanPartition(t, s, 0)
	k := -2
	lo := c.done
	if f.noSync {
		lo = -1
	}
	for i := c.started; i >= lo; i-- { // the longest prefix that matches
		if diffScans(got, f.scans[i+1]) == "" {
			k = i
			break
		}
	}
	if k == -2 {
		t.Fatalf("after a crash with batches up to %d applied and %d started, the partition matches none of them: vs %d: %s",
			c.done, c.started, c.done, diffScans(got, f.scans[c.done+1]))
	}
	o, ok, err := s.Offset(0)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case k < 0 && ok:
		t.Fatalf("offset %d before any Apply", o)
	case k >= 0 && (!ok || o != f.batches[k].next):
		t.Fatalf("offset %d %v, want %d", o, ok, f.batches[k].next)
	}
	checkChangelog(t, s, f.batches[:k+1])
	if k < c.done {
		f.lost++
		catchUp = true
	}
	if catchUp {
		// The sequencer restores from the stored offset.
		for i := k + 1; i < len(f.batches); i++ {
			mustApply(t, s, 0, f.batches[i].recs, f.batches[i].next)
		}
		if d := diffScans(scanPartition(t, s, 0), f.scans[len(f.scans)-1]); d != "" {
			t.Fatalf("caught up from batch %d, the partition differs: %s", k+1, d)
		}
	}
	return k
}

// checkChangelog checks a store against the versions of batches: every
// branch's head is its last version there, its versions are those, none
// beyond, and its latest items hash to the head's state hash.
func checkChangelog(t *testing.T, s *Store, batches []changelogBatch) {
	t.Helper()
	type bkey struct{ project, branch string }
	want := map[bkey][]*schemas.Version{}
	projects := map[string]bool{}
	for _, b := range batches {
		for _, r := range b.recs {
			if v := r.Version; v != nil {
				k := bkey{v.Project, v.Branch}
				want[k] = append(want[k], v)
				projects[v.Project] = true
			}
		}
	}
	nbranches := 0
	for project := range projects {
		branches, err := s.Branches(testOrg, project)
		if err != nil {
			t.Fatal(err)
		}
		nbranches += len(branches)
		for _, br := range branches {
			vs := want[bkey{project, br.Name}]
			if br.Version != uint64(len(vs)) {
				t.Fatalf("%s branch %s: head %d, want %d", project, br.Name, br.Version, len(vs))
			}
			got, err := s.Versions(testOrg, project, br.Name, 1, len(vs)+1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(vs) {
				t.Fatalf("%s branch %s: %d versions, want %d", project, br.Name, len(got), len(vs))
			}
			for i := range got {
				if got[i].Version != vs[i].Version || got[i].StateHash != vs[i].StateHash {
					t.Fatalf("%s branch %s: version %d hash %s, want %d %s", project, br.Name, got[i].Version, got[i].StateHash, vs[i].Version, vs[i].StateHash)
				}
			}
			latest, err := s.Latest(testOrg, project, br.Name)
			if err != nil {
				t.Fatal(err)
			}
			if h := recomputeHash(t, latest); h != vs[len(vs)-1].StateHash {
				t.Fatalf("%s branch %s: latest items hash to %s, want %s", project, br.Name, h, vs[len(vs)-1].StateHash)
			}
		}
	}
	if nbranches != len(want) {
		t.Fatalf("%d branches, want %d", nbranches, len(want))
	}
}

// syncModes run a crash test with the store's two write policies.
func syncModes(t *testing.T, test func(t *testing.T, noSync bool)) {
	t.Run("sync", func(t *testing.T) { test(t, false) })
	t.Run("nosync", func(t *testing.T) { test(t, true) })
}

// checkLost: with syncing no Apply that returned is lost; without, the
// crashes must have lost some (or the test showed nothing about
// restoring them).
func (f *crashFixture) checkLost(t *testing.T, crashes int) {
	t.Helper()
	switch {
	case !f.noSync && f.lost > 0:
		t.Fatalf("%d of %d crashes lost an Apply that had returned, with every Apply synced", f.lost, crashes)
	case f.noSync && f.lost == 0:
		t.Fatalf("none of %d crashes lost an Apply that had returned without syncing: the test did not exercise a lost suffix", crashes)
	}
	t.Logf("%d crashes lost Applies that had returned, restored from their offsets", f.lost)
}

func TestCrashAtFileSystemOperations(t *testing.T) { syncModes(t, crashAtFileSystemOperations) }

func crashAtFileSystemOperations(t *testing.T, noSync bool) {
	f := newCrashFixture(7, 60, noSync)
	mem := vfs.NewCrashableMem()
	rng := rand.New(rand.NewPCG(7, 2))
	var (
		mu     sync.Mutex
		clones []crashClone
		armed  atomic.Bool
	)
	// Before every write operation of Pebble's (file writes, syncs,
	// creations, renames, removals), sometimes: crash.
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(5) != 0 {
			return nil
		}
		done := int(f.done.Load())
		c := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: []int{0, 50, 100}[rng.IntN(3)], RNG: rng})
		clones = append(clones, crashClone{fs: c, done: done, started: int(f.started.Load())})
		return nil
	})
	s := f.open(t, errorfs.Wrap(mem, inj))
	armed.Store(true)
	for i := range f.batches {
		f.apply(t, s, i)
		f.scans = append(f.scans, scanPartition(t, s, 0))
	}
	armed.Store(false)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if len(clones) < len(f.batches)/2 {
		t.Fatalf("only %d crash points", len(clones))
	}
	during, kept := 0, 0
	for i, c := range clones {
		k := f.check(t, c, i%10 == 0)
		if c.started > c.done {
			during++
			if k == c.started {
				kept++
			}
		}
	}
	t.Logf("%d crashes, %d during an Apply, of which %d kept it", len(clones), during, kept)
	f.checkLost(t, len(clones))
}

func TestCrashWhileApplying(t *testing.T) { syncModes(t, crashWhileApplying) }

func crashWhileApplying(t *testing.T, noSync bool) {
	f := newCrashFixture(11, 60, noSync)
	mem := vfs.NewCrashableMem()
	rng := rand.New(rand.NewPCG(11, 2))
	s := f.open(t, mem)
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()

	gate, finished := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(finished)
		for i := range f.batches {
			if _, ok := <-gate; !ok {
				return
			}
			f.started.Store(int64(i))
			if err := s.Apply(0, f.batches[i].recs, f.batches[i].next); err != nil {
				errs <- err
				return
			}
			f.done.Store(int64(i))
			finished <- struct{}{}
		}
	}()

	var clones []crashClone
	for range f.batches {
		gate <- struct{}{}
		// Let the Apply get somewhere: from not started to committed.
		for range rng.IntN(64) {
			runtime.Gosched()
		}
		done := int(f.done.Load())
		c := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: []int{0, 50, 100}[rng.IntN(3)], RNG: rng})
		clones = append(clones, crashClone{fs: c, done: done, started: int(f.started.Load())})
		if _, ok := <-finished; !ok {
			t.Fatal(<-errs)
		}
		f.scans = append(f.scans, scanPartition(t, s, 0))
	}
	close(gate)

	during, kept := 0, 0
	for i, c := range clones {
		k := f.check(t, c, i%10 == 0)
		if c.started > c.done {
			during++
			if k == c.started {
				kept++
			}
		}
	}
	t.Logf("%d crashes, %d during an Apply, of which %d kept it", len(clones), during, kept)
	f.checkLost(t, len(clones))
}
