// Package sequencer is Canon's single writer per project: a consumer group
// on canon.mutations that decides each mutation against the store plus an
// in-memory overlay, publishes the resulting chunks and versions to
// canon.versions in a Kafka transaction that also commits the input
// offsets, and only after that commit writes the same records to the
// Pebble store. See docs/sequencer.md for the protocol and its failure
// cases.
package sequencer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	chlog "github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// Defaults of Config.
const (
	DefaultGroup           = "canon-sequencer"
	DefaultMaxBatchRecords = 500
	DefaultMaxBatchTime    = 20 * time.Millisecond
	DefaultLinger          = 100 * time.Millisecond
	DefaultGatherWait      = 2 * time.Millisecond
	DefaultPushWait        = 6 * time.Millisecond
	DefaultSessionTimeout  = 8 * time.Second
	DefaultTxnTimeout      = 30 * time.Second
	DefaultRestoreBatch    = 2000
	DefaultFetchMaxWait    = 500 * time.Millisecond
)

// Config configures a Sequencer.
type Config struct {
	// Kafka holds the brokers, client id, logger and metrics registerer of
	// the Kafka clients.
	Kafka kafka.ClientConfig
	// Topics are the names of Canon's topics.
	Topics kafka.TopicNames
	// Group is the consumer group of all sequencer instances; default
	// "canon-sequencer". Renaming it makes the new group start from the
	// committed offsets of nobody: canon.mutations is read again from the
	// start, and every record decided before is skipped (never decided
	// again), which takes a while on a long topic.
	Group string
	// InstanceID names this instance: its transactional id is
	// "<Group>-<InstanceID>" and, when given, it is the instance's static
	// group membership (group.instance.id). Keep it across restarts
	// (LoadInstanceID keeps it in the data directory): a restarted
	// instance then fences its predecessor's open transaction at once and
	// takes its partitions back without a rebalance. It must be unique
	// among running instances: two with one id fence each other, and the
	// older stops with ErrDuplicateInstance. Default: the host name and a
	// random suffix, new at every start, with dynamic membership (a
	// restart then waits for the predecessor's session and transaction
	// timeouts, unless another instance fences it; see docs/sequencer.md).
	InstanceID string

	// Store is the instance's Pebble store. The sequencer writes to it
	// after each committed transaction and restores it from canon.versions
	// when it gets a partition.
	Store *store.Store
	// Registry holds the mutators; default model.NewRegistry().
	Registry *model.Registry
	// Bundles compiles the mutator bundles of deploy/v1 records, once per
	// hash (model/bundle's Compile, with its CPU and memory budgets). Nil
	// rejects every deploy (reason bad_bundle): the instance runs only
	// the registry's mutators.
	Bundles *model.BundleCache
	// Limits bound every record; default schemas.DefaultLimits().
	Limits schemas.Limits

	// MaxBatchRecords bounds the mutations decided in one transaction;
	// default 500. A transaction takes whatever is already fetched, up to
	// this count: batches grow with the load, never by waiting.
	MaxBatchRecords int
	// MaxBatchDuration bounds how long a transaction keeps taking more
	// fetched records into its batch; default 20ms. It caps the latency
	// that a large batch adds to its first mutation.
	MaxBatchDuration time.Duration
	// GatherWait bounds how long a transaction whose records were
	// fetched while the previous transaction was committing waits for the
	// fetch that follows them; default 2ms, negative disables it. The
	// Kafka client keeps one fetch per broker and fetches again only when
	// that one is taken: without the wait, the records that reached the
	// broker during a commit would sit out the next transaction too.
	// It never applies to a poll that waited for its records (they are
	// fresh) unless GatherFresh is set, nor to a full batch.
	GatherWait time.Duration
	// GatherFresh makes a transaction wait GatherWait for more records
	// after a poll that waited for its records too (an experiment of issue
	// 22: fewer, larger transactions at the cost of that wait; default
	// off).
	GatherFresh bool
	// Inflight, when set, is the count of records that the producer of
	// the same process is writing to canon.mutations, per partition, and
	// of where Kafka's acknowledgements of them end (the producer's
	// Config.Inflight). A transaction then waits, at most PushWait from
	// its first poll, for the records known to be on their way to the
	// partitions it owns, and never waits when none are: transactions
	// hold what is waiting instead of one poll's worth, so the broker runs
	// fewer of them per mutation. It replaces GatherWait's wait after a
	// stale poll. Nil (the producer runs elsewhere) keeps GatherWait.
	Inflight *kafka.Inflight
	// PushWait bounds how long a transaction waits for the records that
	// Inflight says are coming, from its first poll; default 6ms,
	// negative ignores Inflight.
	PushWait time.Duration
	// Linger is the producer linger; default 100ms, longer than a
	// transaction lasts before its end (MaxBatchDuration and PushWait are
	// shorter), so that its records leave in one produce request when the
	// transaction flushes them at its end, which does not wait for the
	// linger. A short linger sends the first records while the
	// transaction still takes more, and the rest at its end: more produce
	// requests per transaction for the broker to verify and write
	// (docs/performance.md measures both).
	Linger time.Duration
	// SessionTimeout of the group membership; default 8s. An instance
	// that stops heartbeating for this long loses its partitions, and its
	// late transactions are fenced. With a static instance id, a stopped
	// instance keeps its partitions this long too (so that a restart
	// finds them), and another takes them over after it.
	SessionTimeout time.Duration
	// TransactionTimeout is how long the broker lets an open transaction
	// live before aborting it; default 30s. It must be at least
	// SessionTimeout, so that the broker never aborts a transaction of an
	// instance the group still counts as alive: a stall long enough to
	// reach the transaction timeout then also ends the instance's session,
	// and its partitions have moved by the time it learns of the abort.
	// With a shorter one, a stall between the two (a long GC pause, a slow
	// disk) would abort the open transaction of an instance that still
	// owns its partitions: its commit would fail, and it would drop its
	// session and restore every partition it owns for a pause the group
	// tolerated.
	TransactionTimeout time.Duration
	// Checkpoints, when set, restores a partition the store holds nothing
	// of (or much less than a checkpoint) from the newest usable
	// checkpoint in object storage before reading the changelog tail
	// after it (package internal/checkpoint). The checkpoints must be
	// restored into Store.
	Checkpoints chlog.Checkpoints
	// Standbys is how many partitions this instance does not own it keeps
	// warm in its store, following the changelog as a read replica does,
	// so that taking one of them over reads only the tail (see
	// standby.go for which ones); 0, the default, keeps none.
	Standbys int
	// Liveness is the TCP address of the instance's liveness listener
	// ("host:port", ":0" for any free port); "" disables it. With a
	// static InstanceID, each instance advertises it in its group
	// metadata and keeps a connection to every other instance's: when one
	// closes without a goodbye and its address refuses a new connection
	// (the process died; its host did not), the watcher removes the dead
	// instance from the group at once instead of waiting for its session
	// timeout (liveness.go). The listener writes nothing but a goodbye at
	// a deliberate stop and reads nothing; the other instances must be
	// able to reach it (open the port between them).
	Liveness string
	// LivenessAdvertise is the address the other instances dial; default
	// the listener's when it names a host, else this host's address on
	// the route to the first broker, with the listener's port.
	LivenessAdvertise string
	// KeepPartitionsOnStop keeps the static member in the group when Run
	// returns, so that a restart within the session timeout gets its
	// partitions back without a rebalance (a rolling restart that wants
	// to keep assignments). By default a stopping static instance leaves
	// the group after its last commit (an admin LeaveGroup of its own
	// instance id, as a static member does not leave on close), and its
	// partitions move at once.
	KeepPartitionsOnStop bool
	// RestoreBatch is how many changelog records a restore applies to the
	// store per write; default 2000.
	RestoreBatch int
	// FetchMaxWait is how long the broker holds a fetch of
	// canon.mutations that finds no records; default 500ms (Kafka's own
	// fetch.max.wait.ms; franz-go's is 5s). The client keeps one fetch per
	// broker in flight, so a partition whose restore ends after the others
	// (a retried restore, a partition a rebalance added) is fetched only
	// when that fetch returns: this bounds how long its first mutation
	// waits.
	FetchMaxWait time.Duration
	// Committed, when set, is told the records of canon.versions each
	// committed transaction wrote to a partition, after the Kafka commit
	// and after the store holds them (never for a failed store write):
	// from is the store's offset of the partition before the write, last
	// the offset of the last record. The process's changelog feed
	// (changelog.Feed.Publish) hands them to its subscribers without
	// fetching them back from the broker. It runs on the transaction's
	// goroutine: it must not block.
	Committed func(partition int32, from int64, evs []chlog.Event, last int64)

	// Log receives the sequencer's logs; nil discards them.
	Log *slog.Logger
	// Registerer gets the sequencer's metrics; nil disables them.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Topics == (kafka.TopicNames{}) {
		c.Topics = kafka.DefaultTopicNames()
	}
	if c.InstanceID == "" {
		c.InstanceID = newInstanceID()
	}
	if c.Registry == nil {
		c.Registry = model.NewRegistry()
	}
	if c.Limits == (schemas.Limits{}) {
		c.Limits = schemas.DefaultLimits()
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if c.MaxBatchDuration == 0 {
		c.MaxBatchDuration = DefaultMaxBatchTime
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.GatherWait == 0 {
		c.GatherWait = DefaultGatherWait
	}
	if c.PushWait == 0 {
		c.PushWait = DefaultPushWait
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTxnTimeout
	}
	if c.RestoreBatch == 0 {
		c.RestoreBatch = DefaultRestoreBatch
	}
	if c.FetchMaxWait == 0 {
		c.FetchMaxWait = DefaultFetchMaxWait
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("sequencer: no store"))
	}
	if len(c.Kafka.Brokers) == 0 {
		errs = append(errs, errors.New("sequencer: Kafka.Brokers is empty: give at least one host:port"))
	}
	if c.Standbys < 0 {
		errs = append(errs, fmt.Errorf("sequencer: standbys %d: use 0 (none) or a positive count", c.Standbys))
	}
	if c.MaxBatchRecords < 0 || c.RestoreBatch < 0 {
		errs = append(errs, fmt.Errorf("sequencer: batch sizes must be positive (max batch %d, restore batch %d)", c.MaxBatchRecords, c.RestoreBatch))
	}
	if c.Linger < 0 || c.Linger > time.Second {
		errs = append(errs, fmt.Errorf("sequencer: linger %v: use 0 to 1s (default 100ms)", c.Linger))
	}
	if c.GatherWait > time.Second {
		errs = append(errs, fmt.Errorf("sequencer: gather wait %v: use at most 1s, or a negative value to disable it (default 2ms)", c.GatherWait))
	}
	if c.PushWait > c.MaxBatchDuration && c.MaxBatchDuration > 0 {
		errs = append(errs, fmt.Errorf("sequencer: push wait %v is longer than the batch duration %v: use at most that, or a negative value to disable it (default %v)",
			c.PushWait, c.MaxBatchDuration, DefaultPushWait))
	}
	if c.Inflight != nil && c.Store != nil && c.Inflight.Partitions() != c.Store.Partitions() {
		errs = append(errs, fmt.Errorf("sequencer: Inflight counts %d partitions but the store has %d: make it with kafka.NewInflight of the topics' partition count",
			c.Inflight.Partitions(), c.Store.Partitions()))
	}
	if c.FetchMaxWait < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("sequencer: fetch max wait %v: use at least 10ms (default 500ms)", c.FetchMaxWait))
	}
	if c.LivenessAdvertise != "" && c.Liveness == "" {
		errs = append(errs, errors.New("sequencer: a liveness advertised address without a liveness listener: set Liveness too (--liveness-addr)"))
	}
	if c.InstanceID != "" {
		if err := checkInstanceID(c.InstanceID); err != nil {
			errs = append(errs, fmt.Errorf("sequencer: %w", err))
		}
	}
	if c.TransactionTimeout > 0 && c.SessionTimeout > 0 && c.TransactionTimeout < c.SessionTimeout {
		errs = append(errs, fmt.Errorf("sequencer: transaction timeout %v is shorter than the session timeout %v: the broker would abort the transactions of "+
			"an instance that stalls for less than its session and still owns its partitions; set TransactionTimeout to at least SessionTimeout",
			c.TransactionTimeout, c.SessionTimeout))
	}
	return errors.Join(errs...)
}
