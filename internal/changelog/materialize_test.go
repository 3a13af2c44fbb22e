package changelog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// changelogTopics is one test's topics on the real broker, one partition
// each, with a transactional producer (the sequencer's way) and a plain
// one (someone producing to canon.versions by hand).
type changelogTopics struct {
	t       *testing.T
	brokers []string
	names   kafka.TopicNames
	txn     *kgo.Client
	raw     *kgo.Client
}

func newChangelogTopics(t *testing.T, k *testenv.Kafka) *changelogTopics {
	t.Helper()
	prefix := k.Topic(t, "materialize") + "."
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	info, err := kafka.EnsureTopics(ctx, raw, kafka.TopicsConfig{Names: kafka.DefaultTopicNames().WithPrefix(prefix), Partitions: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(prefix+"txn"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	return &changelogTopics{t: t, brokers: k.Brokers, names: info.Names, txn: txn, raw: raw}
}

// changelogVersion is version n of acme/p's main branch, named name: a
// version the store takes after version n-1 of the same name.
func changelogVersion(t *testing.T, n uint64, name string) *schemas.Version {
	t.Helper()
	scalars := map[string]json.RawMessage{"name": json.RawMessage(fmt.Sprintf(`"%s %d"`, name, n))}
	hash, err := (&schemas.StateHasher{}).StateHash(scalars)
	if err != nil {
		t.Fatal(err)
	}
	return &schemas.Version{Org: "acme", Project: "p", Branch: "main", Version: n, Parent: n - 1, TS: int64(n),
		Scalars: scalars, Items: []schemas.ItemChange{}, LastIDs: map[string]uint64{"c": n}, StateHash: hash,
		Mutations: []schemas.Outcome{{ClientGroup: "g", Client: "c", ID: n, Name: "project.set",
			Args: json.RawMessage(`{}`), Status: schemas.StatusApplied, Offset: int64(n)}}}
}

func (c *changelogTopics) record(schema string, value []byte) *kgo.Record {
	return &kgo.Record{Topic: c.names.Versions, Partition: 0, Key: schemas.ProjectKey("acme", "p"), Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schema)}}}
}

// commit writes versions from..to of name in one transaction each, a
// chunk before each version, as the sequencer does.
func (c *changelogTopics) commit(from, to uint64, name string) {
	c.t.Helper()
	ctx := context.Background()
	last := int64(-1)
	for n := from; n <= to; n++ {
		value, err := schemas.EncodeVersion(changelogVersion(c.t, n, name), schemas.DefaultLimits())
		if err != nil {
			c.t.Fatal(err)
		}
		chunk, hash := schemas.EncodeChunk(&schemas.Chunk{Org: "acme", Project: "p", Data: fmt.Appendf(nil, `{"n":%d}`, n)})
		cr := c.record(schemas.SchemaChunkV1, chunk)
		cr.Headers = append(cr.Headers, kgo.RecordHeader{Key: schemas.HeaderChunkHash, Value: []byte(hash)})
		if err := c.txn.BeginTransaction(); err != nil {
			c.t.Fatal(err)
		}
		vr := c.record(schemas.SchemaVersionV1, value)
		if err := c.txn.ProduceSync(ctx, cr, vr).FirstErr(); err != nil {
			c.t.Fatal(err)
		}
		if err := c.txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			c.t.Fatal(err)
		}
		last = vr.Offset
	}
	// EndTransaction returns once the coordinator has decided the commit;
	// it writes the markers to the partition after that. Until the marker
	// is there the last stable offset stays before the transaction, and a
	// run started then takes that older offset for its target.
	deadline := time.Now().Add(30 * time.Second)
	for c.lastStable() <= last {
		if time.Now().After(deadline) {
			c.t.Fatalf("the last stable offset did not pass offset %d in 30 s", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// foreign writes a record outside any transaction and returns its offset.
func (c *changelogTopics) foreign(schema string, value []byte) int64 {
	c.t.Helper()
	r := c.record(schema, value)
	if err := c.raw.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		c.t.Fatal(err)
	}
	return r.Offset
}

func (c *changelogTopics) encoded(n uint64, name string) []byte {
	value, err := schemas.EncodeVersion(changelogVersion(c.t, n, name), schemas.DefaultLimits())
	if err != nil {
		c.t.Fatal(err)
	}
	return value
}

// lastStable is the partition's last stable offset.
func (c *changelogTopics) lastStable() int64 {
	c.t.Helper()
	ends, err := kadm.NewClient(c.raw).ListCommittedOffsets(context.Background(), c.names.Versions)
	if err != nil {
		c.t.Fatal(err)
	}
	o, _ := ends.Lookup(c.names.Versions, 0)
	return o.Offset
}

// materialized is what one Run did, from its hooks.
type materialized struct {
	err          error
	from, target int64 // of the last start
	skipped      []int64
	dropped      int
}

// materialize runs a Materializer on partition 0 into st. A Forever run
// is stopped once caught up with its last start's target.
func (c *changelogTopics) materialize(st *store.Store, until Until) materialized {
	c.t.Helper()
	var res materialized
	caught := make(chan struct{}, 1)
	signal := func(next int64) {
		if next >= res.target {
			select {
			case caught <- struct{}{}:
			default:
			}
		}
	}
	m, err := NewMaterializer(MaterializerConfig{
		Tail: Config{Kafka: kafka.ClientConfig{Brokers: c.brokers}, Topics: c.names, Partitions: []int32{0}},
		Sink: st, Until: until, Batch: 3,
		Hooks: Hooks{
			Started: func(from, target map[int32]int64) {
				res.from, res.target = from[0], target[0]
				signal(from[0])
			},
			Applied: func(_ int32, next int64, _ int, _ int64) { signal(next) },
			Skipped: func(_ int32, offset int64, _ error) { res.skipped = append(res.skipped, offset) },
			Dropped: func(int32, error) { res.dropped++ },
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if until != Forever {
		res.err = <-done
		return res
	}
	select {
	case res.err = <-done:
		return res
	case <-caught:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		res.err = fmt.Errorf("a Forever run ended with %w, want context.Canceled once stopped", err)
	}
	return res
}

func openStore(t *testing.T) *store.Store {
	st, err := store.Open(store.Config{Dir: "s", FS: vfs.NewMem(), Partitions: 1, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// The decision table, each row on the real broker for each offset
// policy: store ahead (drop and rebuild), changelog truncated (fail),
// foreign record (skip and count; a rebuild when it contradicts a store
// resumed from its offset), newer schema major (stop), normal catch-up.
func TestMaterializerDecisionTable(t *testing.T) {
	k := testenv.NewKafka(t)
	type want struct {
		err error // errors.Is
		// head is the head's version; after an error, the highest allowed.
		head    uint64
		name    string // of the head's version
		skipped int
		dropped int
	}
	rows := []struct {
		name string
		// setup writes the changelog and prepares the store; it returns
		// the offset the run must start from (-1: not checked), and
		// where an error row must stop (the stored offset at most).
		setup func(t *testing.T, c *changelogTopics, st *store.Store) (from, stop int64)
		want  want
	}{{
		name: "normal catch-up from the stored offset",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			c.commit(1, 2, "a")
			if r := c.materialize(st, LastStable); r.err != nil {
				t.Fatal(r.err)
			}
			from, _, _ := st.Offset(0)
			c.commit(3, 5, "a")
			return from, 0
		},
		want: want{head: 5, name: "a"},
	}, {
		name: "store ahead of the changelog: dropped and rebuilt",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			other := newChangelogTopics(t, k)
			other.commit(1, 6, "old")
			if r := other.materialize(st, LastStable); r.err != nil {
				t.Fatal(r.err)
			}
			c.commit(1, 2, "new")
			return 0, 0
		},
		want: want{head: 2, name: "new", dropped: 1},
	}, {
		name: "changelog truncated: fails",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			c.commit(1, 3, "a")
			var os kadm.Offsets
			os.Add(kadm.Offset{Topic: c.names.Versions, Partition: 0, At: 3})
			resp, err := kadm.NewClient(c.raw).DeleteRecords(context.Background(), os)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			return -1, 0
		},
		want: want{err: ErrTruncated},
	}, {
		name: "foreign records from the start: skipped and counted",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			c.commit(1, 2, "a")
			c.foreign(schemas.SchemaVersionV1, []byte("not json"))
			c.foreign(schemas.SchemaVersionV1, c.encoded(7, "forged")) // a gap
			c.commit(3, 3, "a")
			return 0, 0
		},
		want: want{head: 3, name: "a", skipped: 2},
	}, {
		name: "foreign records after the stored offset: skipped, then a rebuild",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			c.commit(1, 2, "a")
			if r := c.materialize(st, LastStable); r.err != nil {
				t.Fatal(r.err)
			}
			c.foreign(schemas.SchemaVersionV1, []byte("not json"))
			c.foreign(schemas.SchemaVersionV1, c.encoded(7, "forged"))
			c.commit(3, 3, "a")
			return 0, 0 // rebuilt: the last start is from the first record
		},
		// The undecodable record is skipped at once; the forged version
		// contradicts the store, rebuilt from the start, where both are
		// skipped.
		want: want{head: 3, name: "a", skipped: 3, dropped: 1},
	}, {
		name: "newer schema major: stops",
		setup: func(t *testing.T, c *changelogTopics, st *store.Store) (int64, int64) {
			c.commit(1, 1, "a")
			stop := c.foreign("version/v9", c.encoded(2, "a"))
			c.commit(2, 2, "a")
			return 0, stop
		},
		want: want{err: schemas.ErrNewerSchema, head: 1},
	}}
	for _, until := range []Until{LastStable, End, Forever} {
		for _, row := range rows {
			t.Run(fmt.Sprintf("%s/%s", []string{"LastStable", "End", "Forever"}[until], row.name), func(t *testing.T) {
				c := newChangelogTopics(t, k)
				st := openStore(t)
				from, stop := row.setup(t, c, st)
				r := c.materialize(st, until)
				w := row.want
				if w.err != nil {
					if !errors.Is(r.err, w.err) {
						t.Fatalf("run ended with %v, want %v", r.err, w.err)
					}
				} else if r.err != nil {
					t.Fatal(r.err)
				}
				if from >= 0 && r.from != from {
					t.Errorf("read from offset %d, want %d", r.from, from)
				}
				h, err := st.Head("acme", "p", "main")
				if err != nil {
					t.Fatal(err)
				}
				if h.Version != w.head && (w.err == nil || h.Version > w.head) {
					t.Errorf("head %d, want %d", h.Version, w.head)
				}
				if w.err == nil && w.head > 0 {
					got, err := h.State.StateHash(h.Scalars)
					if want := changelogVersion(t, w.head, w.name).StateHash; err != nil || got != want {
						t.Errorf("head's state hash %s (%v), want %s (version %d of %q)", got, err, want, w.head, w.name)
					}
				}
				if len(r.skipped) != w.skipped || r.dropped != w.dropped {
					t.Errorf("skipped %v and dropped %d times, want %d skipped, %d dropped", r.skipped, r.dropped, w.skipped, w.dropped)
				}
				off, ok, err := st.Offset(0)
				if err != nil {
					t.Fatal(err)
				}
				switch lso := c.lastStable(); {
				case w.err != nil && ok && off > stop:
					t.Errorf("stored offset %d beyond the record that stopped the run, at %d", off, stop)
				case w.err == nil && (!ok || off != lso):
					t.Errorf("stored offset %d (%v), want the last stable offset %d", off, ok, lso)
				}
			})
		}
	}
}
