package sequencer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	chlog "github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// Sequencer is one instance of the sequencer group.
type Sequencer struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	decider *model.Decider

	// Partition counts of the topics, read at start.
	partitions         int32
	rejectedPartitions int32

	mu    sync.Mutex
	owned map[int32]bool // assigned partitions of canon.mutations
	// needRestore holds the owned partitions not restored since their
	// assignment or since a doubt, with the mark's generation: a restore
	// that ends after a newer mark (revoked and assigned again meanwhile)
	// does not clear it.
	needRestore map[int32]uint64
	markGen     uint64
	// restoredGen is, per owned partition, the mark generation of the
	// restore that brought it up; checks are the checks of restored
	// checkpoints still running (checks.go); corrupt holds the
	// partitions whose local state must be dropped before their next
	// restore (a restored checkpoint failed its check, or a read found
	// the store corrupt). All under mu.
	restoredGen map[int32]uint64
	checks      map[int32]*restoredCheck
	corrupt     map[int32]bool
	wake        context.CancelFunc // interrupts the current poll, so that new partitions are restored at once
	joined      bool               // the session got its first assignment (possibly empty)
	running     atomic.Bool
	generation  atomic.Int32 // of the latest assignment

	// Used by the poll loop only: when a partition whose restore failed
	// is tried again; the highest input offset of each restored partition
	// that was decided before (see skipDecided), and whether skipping
	// below it was reported since the restore.
	nextTry     map[int32]time.Time
	decidedUpTo map[int32]int64
	warned      map[int32]bool
	// consumed is, per partition, the offset after the last record
	// polled in this session since the last abort, for comparing with
	// Config.Inflight.
	consumed map[int32]int64
	// openSince is when a restore first saw a transaction of another
	// instance open on a changelog partition, by "partition/producer id".
	openSince map[string]time.Time
	// static is set when the instance id was given: the instance is then
	// a static member of the group (see Config.InstanceID).
	static bool

	// Standbys (standby.go): ownGen counts changes of the owned
	// partitions (under mu), standbyWake tells the standby loop of one,
	// and standbyGen is the change the loop has applied, standbyDone
	// closed at each.
	ownGen      uint64
	standbyWake chan struct{}
	// restoreLags is, per partition being restored, the changelog
	// records its restore has left (under mu), for Ready.
	restoreLags map[int32]int64
	standbyMu   sync.Mutex
	standbyGen  uint64
	standbyDone chan struct{}
	// standbyLags is the last known lag of each standby copy, and
	// standbyMeasured the copies the LagWatch has measured (under
	// standbyMu).
	standbyLags     map[int32]int64
	standbyMeasured map[int32]bool
	// syncedAssignment is the whole assignment of the latest sync, under
	// mu (balancer.go); nil while unknown.
	syncedAssignment map[int32]bool
	// memberID is the group member id of the latest assignment (under
	// mu), for leaving at stop; live the liveness listener and watches,
	// nil without (liveness.go).
	memberID string
	live     *liveness
}

// New checks cfg and returns a Sequencer; Run starts it.
func New(cfg Config) (*Sequencer, error) {
	static := cfg.InstanceID != ""
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	decider := model.NewDecider(cfg.Store, cfg.Registry, cfg.Limits)
	if cfg.Bundles != nil {
		decider.SetBundles(&storeBundles{st: cfg.Store, cache: cfg.Bundles, reg: cfg.Registry})
	}
	return &Sequencer{
		cfg:         cfg,
		log:         cfg.Log.With("component", "sequencer", "instance", cfg.InstanceID),
		m:           newMetrics(cfg.Registerer),
		decider:     decider,
		owned:       map[int32]bool{},
		needRestore: map[int32]uint64{},
		restoredGen: map[int32]uint64{},
		checks:      map[int32]*restoredCheck{},
		corrupt:     map[int32]bool{},
		nextTry:     map[int32]time.Time{},
		decidedUpTo: map[int32]int64{},
		warned:      map[int32]bool{},
		consumed:    map[int32]int64{},
		openSince:   map[string]time.Time{},
		static:      static,
		standbyWake: make(chan struct{}, 1),
		restoreLags: map[int32]int64{},
		standbyDone: make(chan struct{}),
	}, nil
}

// Ready reports whether the instance can decide: it runs and every
// partition it owns is restored.
func (s *Sequencer) Ready(context.Context) error {
	if !s.running.Load() {
		return errors.New("sequencer is not running")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.joined {
		return fmt.Errorf("joining group %s", s.cfg.Group)
	}
	if len(s.needRestore) > 0 {
		ps := make([]int32, 0, len(s.needRestore))
		for p := range s.needRestore {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		lags := make([]string, len(ps))
		for i, p := range ps {
			lags[i] = strconv.Itoa(int(p))
			if lag, ok := s.restoreLags[p]; ok {
				lags[i] += fmt.Sprintf(" (%d records left)", lag)
			}
		}
		return fmt.Errorf("restoring partitions %s of %s", strings.Join(lags, ", "), s.cfg.Topics.Versions)
	}
	return nil
}

// Serves reports whether this instance's store holds partition p of
// canon.versions up to what has been decided: the instance runs, owns p
// and has restored it. Reads of p's projects on this node are then
// current; otherwise another instance owns p (or will, after a
// rebalance) and readers on this node must be sent there.
func (s *Sequencer) Serves(p int32) bool {
	if !s.running.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, restoring := s.needRestore[p]
	return s.owned[p] && !restoring
}

// Generation is the consumer group generation of this instance's latest
// assignment (-1 when not running): checkpoints of its partitions carry
// it, so that a newer owner's checkpoint wins over a zombie's.
func (s *Sequencer) Generation() int32 {
	if !s.running.Load() {
		return -1
	}
	return s.generation.Load()
}

// Owned returns the partitions this instance owns and has restored, and
// whose restored checkpoint passed its check, in order: the ones it
// takes checkpoints of. A checkpoint is never taken of a restore that is
// not checked yet.
func (s *Sequencer) Owned() []int32 {
	if !s.running.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int32, 0, len(s.owned))
	for p := range s.owned {
		if _, restoring := s.needRestore[p]; !restoring && s.checks[p] == nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// errSession means the transactional session cannot be used any more: the
// instance was fenced, or a transaction ended ambiguously. Run starts a new
// session after restoring every owned partition.
var errSession = errors.New("transactional session failed")

// ErrDuplicateInstance is returned by Run when another running instance
// joined the group with the same instance id: one of the two must go, and
// this one, fenced by the newer, stops.
var ErrDuplicateInstance = errors.New("duplicate sequencer instance id")

// Run consumes and decides until ctx ends, then leaves the group. A failed
// session is replaced by a new one (with every partition restored again),
// so Run returns only when ctx ends or the configuration cannot work.
func (s *Sequencer) Run(ctx context.Context) error {
	if err := s.readPartitionCounts(ctx); err != nil {
		return err
	}
	if s.cfg.Liveness != "" && s.static {
		l, err := newLiveness(s, s.cfg.Liveness, s.cfg.LivenessAdvertise)
		if err != nil {
			return err
		}
		s.live = l
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.run(lctx)
		}()
		defer func() {
			cancel()
			<-done
		}()
		s.log.Info("liveness listener", "addr", l.ln.Addr().String(), "advertised", l.addr)
	}
	s.running.Store(true)
	defer s.running.Store(false)
	if s.cfg.Standbys > 0 {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			wg.Go(func() { _ = s.standbyLagWatch().Run(sctx) })
			s.runStandbys(sctx)
			wg.Wait()
		}()
		defer func() {
			cancel()
			<-done
		}()
	}
	backoff := 100 * time.Millisecond
	for {
		err := s.runSession(ctx)
		if ctx.Err() != nil {
			s.leaveOnStop()
			return nil
		}
		if errors.Is(err, ErrDuplicateInstance) {
			return err
		}
		s.log.Error("sequencer session ended; starting a new one", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (s *Sequencer) readPartitionCounts(ctx context.Context) error {
	cl, err := s.cfg.Kafka.Aux("metadata").NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	// Canon's processes create the topics at start; a topic still missing
	// after this long is not coming.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	counts, err := kafka.ReadPartitionCounts(ctx, cl, s.cfg.Topics)
	if err != nil {
		return fmt.Errorf("read Canon's topics (create them with 'canon topics'): %w", err)
	}
	m, r := counts.Mutations, counts.Rejected
	if m != s.cfg.Store.Partitions() {
		return fmt.Errorf("the store was opened for %d partitions but %s has %d", s.cfg.Store.Partitions(), s.cfg.Topics.Mutations, m)
	}
	s.partitions, s.rejectedPartitions = m, r
	return nil
}

func (s *Sequencer) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	member, gen := cl.GroupMetadata()
	s.generation.Store(gen)
	if s.live != nil {
		s.live.assigned(cl)
	}
	// Before franz-go fetches the new partitions' offsets (takeover.go).
	s.fenceGoneOwners(ctx, cl, assigned[s.cfg.Topics.Mutations])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.joined = true // called after every join, even with nothing new
	s.memberID = member
	s.dropUnassignedLocked()
	for _, p := range assigned[s.cfg.Topics.Mutations] {
		s.owned[p] = true
		s.markRestoreLocked(p)
	}
	s.m.ownedPartitions.Set(float64(len(s.owned)))
	s.m.restoring.Set(float64(len(s.needRestore)))
	s.standbyChangedLocked()
	s.log.Info("partitions assigned", "partitions", assigned[s.cfg.Topics.Mutations])
	if s.wake != nil {
		s.wake() // an idle partition must not wait for a record to be restored
	}
}

// restoreRetry is how long a partition whose restore failed waits before
// the next attempt, and so how long a poll waits while one does.
const restoreRetry = time.Second

// poll waits for records; an assignment interrupts it, and it returns
// after restoreRetry while a partition waits for its restore.
func (s *Sequencer) poll(ctx context.Context, sess *kgo.GroupTransactSession) kgo.Fetches {
	pctx, cancel := context.WithCancel(ctx)
	if len(s.pendingRestores()) > 0 {
		pctx, cancel = context.WithTimeout(ctx, restoreRetry)
	}
	defer cancel()
	s.mu.Lock()
	s.wake = cancel
	s.mu.Unlock()
	fs := sess.PollRecords(pctx, s.cfg.MaxBatchRecords)
	s.mu.Lock()
	s.wake = nil
	s.mu.Unlock()
	return fs
}

func (s *Sequencer) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range revoked[s.cfg.Topics.Mutations] {
		delete(s.owned, p)
		delete(s.needRestore, p)
		delete(s.restoredGen, p)
	}
	s.m.ownedPartitions.Set(float64(len(s.owned)))
	s.m.restoring.Set(float64(len(s.needRestore)))
	s.standbyChangedLocked()
	if len(revoked[s.cfg.Topics.Mutations]) > 0 {
		s.log.Info("partitions revoked", "partitions", revoked[s.cfg.Topics.Mutations])
	}
}

// markRestoreLocked marks an owned partition for restore; s.mu is held.
func (s *Sequencer) markRestoreLocked(p int32) {
	s.markGen++
	s.needRestore[p] = s.markGen
	s.m.restoring.Set(float64(len(s.needRestore)))
}

// dropOwnership forgets every partition when a session ends: the next
// session is a new group member, and each partition it gets is assigned,
// and so restored, anew. Keeping the old ones would restore partitions
// that other instances now own.
func (s *Sequencer) dropOwnership() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.owned)
	clear(s.needRestore)
	clear(s.restoredGen)
	clear(s.nextTry)
	clear(s.decidedUpTo)
	clear(s.warned)
	clear(s.consumed)
	clear(s.openSince)
	s.syncedAssignment = nil
	s.joined = false
	s.m.ownedPartitions.Set(0)
	s.m.restoring.Set(0)
	s.standbyChangedLocked()
}

// pendingRestores returns the partitions that need a restore, with the
// generation of their mark.
func (s *Sequencer) pendingRestores() map[int32]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.needRestore)
}

// markedSince reports whether partition p was marked for restore again
// since the mark of generation gen.
func (s *Sequencer) markedSince(p int32, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.needRestore[p]
	return ok && g != gen
}

// restored clears a partition's mark unless it was marked again since
// the restore began.
func (s *Sequencer) restored(p int32, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.needRestore[p] == gen {
		delete(s.needRestore, p)
		s.restoredGen[p] = gen
	}
	s.m.restoring.Set(float64(len(s.needRestore)))
}

func (s *Sequencer) runSession(ctx context.Context) error {
	base, err := s.cfg.Kafka.Opts()
	if err != nil {
		return err
	}
	txnID := s.cfg.Group + "-" + s.cfg.InstanceID
	opts := append(base,
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.cfg.Topics.Mutations),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(s.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(s.cfg.FetchMaxWait),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(s.cfg.Linger),
		// Canon's records reach 2 MiB (a mutation with a large item body);
		// the topics accept 4 MiB.
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		// Canon's balancer gives a dead owner's partitions to the member
		// with the warmest copy (balancer.go); cooperative-sticky is the
		// common protocol while a rolling upgrade brings it to every
		// member.
		kgo.Balancers(&warmBalancer{copies: s.copies, synced: s.synced, liveness: s.livenessAddr()}, kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		// A member that died is expired after the session timeout; the
		// others learn of the rebalance at their next heartbeat.
		kgo.HeartbeatInterval(s.cfg.SessionTimeout/10),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onRevoked),
		kgo.WithHooks(requestHook{s.m}),
	)
	if s.static {
		// A restart with the same id takes the place of its predecessor
		// in the group, with its partitions, without a rebalance.
		opts = append(opts, kgo.InstanceID(s.cfg.InstanceID))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("create transactional session: %w", err)
	}
	defer func() {
		// Whatever this session decided but did not commit is gone; the
		// next one starts from the changelog.
		s.decider.Reset()
		sess.Close()
		s.dropOwnership()
	}()
	s.log.Info("sequencer joining group", "group", s.cfg.Group, "topic", s.cfg.Topics.Mutations, "transactional_id", txnID)

	// Initialize the producer before any restore: this fences the
	// previous epoch of the transactional id, whose open transaction (a
	// killed predecessor's, or this process's own after an ambiguous end)
	// the broker then aborts at once, or completes if its commit had
	// begun. Otherwise the restore would wait for its timeout.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: initialize the producer of transactional id %s: %w", errSession, txnID, err)
	}

	for {
		polled := time.Now()
		fetches := s.poll(ctx, sess)
		// A poll that did not wait took a fetch buffered during the last
		// transaction: the broker may hold newer records.
		stale := time.Since(polled) < staleFetch
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, kerr.FencedInstanceID) {
				fatal = fmt.Errorf("another running sequencer has instance id %s in group %s: give every instance its own InstanceID: %w",
					s.cfg.InstanceID, s.cfg.Group, ErrDuplicateInstance)
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if fatal != nil {
			return fatal
		}
		waiting, err := s.restorePending(ctx, sess.Client())
		if err != nil {
			s.log.Warn("restore not complete; the partitions wait, paused, and are tried again",
				"partitions", slices.Sorted(maps.Keys(waiting)), "retry_in", restoreRetry, "err", err)
		}
		recs := fetches.Records()
		s.noteConsumed(recs)
		s.noteAge(recs)
		if slices.ContainsFunc(recs, func(r *kgo.Record) bool { return waiting[r.Partition] }) {
			// Records of a partition that is not restored were fetched
			// before it was paused: deciding them could publish a version
			// twice. Abort, which rewinds the consumed offsets; the
			// others are polled again at once.
			if _, aerr := s.abort(ctx, sess); aerr != nil {
				return aerr
			}
			continue
		}
		if len(recs) == 0 {
			continue
		}
		if err := s.transact(ctx, sess, recs, stale); err != nil {
			return err
		}
	}
}

// abort ends an empty or failed transaction, rewinding the consumed
// offsets to the committed ones so the records are polled again.
func (s *Sequencer) abort(ctx context.Context, sess *kgo.GroupTransactSession) (bool, error) {
	clear(s.consumed) // the session rewinds to the committed offsets
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("%w: begin: %w", errSession, err)
	}
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		return false, fmt.Errorf("%w: abort: %w", errSession, err)
	}
	return false, nil
}

// produced is what one committed transaction wrote to one partition of
// canon.versions, for the store.
type produced struct {
	recs []store.Record
	last int64 // offset of the last record
}

// batch is the state of one transaction.
type batch struct {
	mu         sync.Mutex
	produceErr error
	pending    []pendingRec
	versions   int
	// rejected are the batch's rejections, for the store once committed.
	rejected []*schemas.Rejected
}

type pendingRec struct {
	rec store.Record
	kr  *kgo.Record
}

func (b *batch) promise(r *kgo.Record, err error) {
	if err != nil {
		b.mu.Lock()
		if b.produceErr == nil {
			b.produceErr = fmt.Errorf("produce to %s[%d]: %w", r.Topic, r.Partition, err)
		}
		b.mu.Unlock()
	}
}

func (s *Sequencer) transact(ctx context.Context, sess *kgo.GroupTransactSession, recs []*kgo.Record, stale bool) error {
	start := time.Now()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("%w: begin transaction: %w", errSession, err)
	}
	b := &batch{}
	var decideErr error
	var failed int32 // the partition of the record whose decision failed
	outcomes := map[string]int{}
	decided := 0
	var decideTime, waitTime time.Duration
	for len(recs) > 0 && decideErr == nil {
		t := time.Now()
		for _, r := range s.skipDecided(recs) {
			outcome, err := s.handle(ctx, sess, b, r)
			if err != nil {
				decideErr, failed = err, r.Partition
				break
			}
			outcomes[outcome]++
		}
		decided += len(recs)
		t2 := time.Now()
		decideTime += t2.Sub(t)
		if decideErr == nil {
			recs, decideErr = s.more(ctx, sess, decided, start, stale)
			stale = false
			waitTime += time.Since(t2)
		}
	}
	b.mu.Lock()
	perr := b.produceErr
	b.mu.Unlock()
	try := kgo.TryCommit
	if decideErr != nil || perr != nil {
		try = kgo.TryAbort
	}
	flushStart := time.Now()
	if try == kgo.TryCommit {
		// End flushes first too; flushing here separates the produce's
		// round trip from the commit's in the metrics. An error here is
		// the context's, which End reports.
		_ = sess.Client().Flush(ctx)
	}
	endStart := time.Now()
	committed, err := sess.End(ctx, try)
	endTime := time.Since(endStart)
	if err != nil {
		// Ambiguous: the transaction may or may not have committed. Never
		// abort or redo work that may have committed: drop the session,
		// and let the restore read what the changelog really holds.
		s.m.txnAborted.WithLabelValues("error").Inc()
		return fmt.Errorf("%w: end transaction: %w", errSession, err)
	}
	b.mu.Lock()
	perr = b.produceErr
	b.mu.Unlock()
	if !committed {
		cause := "rebalance"
		switch {
		case errors.Is(decideErr, errRestorePending):
			s.log.Info("transaction aborted: new partitions came into the batch before their restore")
		case decideErr != nil:
			cause = "error"
			s.log.Error("decide failed; transaction aborted, records will be decided again", "err", decideErr)
			if storeCorrupt(decideErr) {
				// Deciding again over the same data would fail again.
				s.corruptWhileDeciding(failed, decideErr)
			}
		case perr != nil:
			cause = "error"
			s.log.Error("produce failed; transaction aborted, records will be decided again", "err", perr)
		default:
			s.log.Info("transaction aborted by a rebalance; records will be decided again by their owner")
		}
		s.m.txnAborted.WithLabelValues(cause).Inc()
		s.decider.Reset()
		clear(s.consumed) // the session rewinds to the committed offsets
		return nil
	}
	storeStart := time.Now()
	defer func() {
		s.m.phase.WithLabelValues(phaseStore).Observe(time.Since(storeStart).Seconds())
	}()
	s.m.phase.WithLabelValues(phaseDecide).Observe(decideTime.Seconds())
	s.m.phase.WithLabelValues(phaseWait).Observe(waitTime.Seconds())
	s.m.phase.WithLabelValues(phaseFlush).Observe(endStart.Sub(flushStart).Seconds())
	s.m.phase.WithLabelValues(phaseEnd).Observe(endTime.Seconds())
	s.m.txnSeconds.Observe(time.Since(start).Seconds())
	s.m.batchSize.Observe(float64(decided))
	s.m.versions.Add(float64(b.versions))
	for o, n := range outcomes {
		s.m.outcomes.WithLabelValues(o).Add(float64(n))
	}

	// Committed: now, and only now, the store gets the same records.
	byPartition := map[int32]*produced{}
	for _, pr := range b.pending {
		pp := byPartition[pr.kr.Partition]
		if pp == nil {
			pp = &produced{}
			byPartition[pr.kr.Partition] = pp
		}
		pp.recs = append(pp.recs, pr.rec)
		pp.last = max(pp.last, pr.kr.Offset)
	}
	for p, pp := range byPartition {
		from := int64(-1)
		if s.cfg.Committed != nil {
			if o, err := s.cfg.Store.Applied(p); err == nil {
				from = o
			}
		}
		// The records are the Decider's: their hashes were computed from
		// their bytes, which the store need not do again.
		if err := s.cfg.Store.ApplyDecided(p, pp.recs, pp.last+1); err != nil {
			// The changelog has it; the restore will bring it into the store.
			s.log.Error("apply committed records to the store; partition will be restored", "partition", p, "err", err)
			s.mu.Lock()
			if storeCorrupt(err) {
				s.corrupt[p] = true // the restore starts from elsewhere
			}
			if s.owned[p] {
				s.markRestoreLocked(p)
			}
			s.mu.Unlock()
		} else if s.cfg.Committed != nil && from >= 0 {
			s.cfg.Committed(p, from, s.committedEvents(b, p), pp.last)
		}
	}
	// The read API tells a client why its mutation was rejected, rather
	// than "pending" forever. Not part of the changelog: a failure here
	// loses only that answer.
	if len(b.rejected) > 0 {
		if err := s.cfg.Store.RecordRejections(b.rejected, 0, -1); err != nil {
			s.log.Error("record committed rejections in the store", "err", err)
		}
	}
	s.decider.Reset()
	return nil
}

// more grows a transaction's batch with records that are already
// fetched, while the batch is under MaxBatchRecords and MaxBatchDuration
// and no partition waits for a restore (its records must not be decided
// before it). It waits for new ones only when more are known to be on
// their way (Config.Inflight), until PushWait from the first poll, or,
// without Inflight, after a stale first poll, for at most GatherWait: the
// fetch issued when that poll took the buffered one brings what reached
// the broker since.
func (s *Sequencer) more(ctx context.Context, sess *kgo.GroupTransactSession, decided int, start time.Time, stale bool) ([]*kgo.Record, error) {
	left := s.cfg.MaxBatchRecords - decided
	if left <= 0 || time.Since(start) >= s.cfg.MaxBatchDuration {
		return nil, nil
	}
	if len(s.pendingRestores()) > 0 {
		return nil, nil
	}
	// deadline is how long to wait for records; zero takes only what is
	// buffered.
	var deadline time.Time
	informed := s.cfg.Inflight != nil && s.cfg.PushWait > 0
	if sess.Client().BufferedFetchRecords() == 0 {
		switch {
		case informed:
			deadline = start.Add(s.cfg.PushWait)
			if !time.Now().Before(deadline) || !s.onTheirWay() {
				return nil, nil
			}
			s.m.pushWaits.Inc()
		case (stale || s.cfg.GatherFresh) && s.cfg.GatherWait > 0:
			deadline = time.Now().Add(s.cfg.GatherWait)
			s.m.gathers.Inc()
		default:
			return nil, nil
		}
	}
	var recs []*kgo.Record
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			until := deadline
			if informed {
				// A record may arrive in a fetch before its producer
				// counted its acknowledgement: look at the counts again
				// every inflightRecheck rather than wait for nothing.
				if next := time.Now().Add(inflightRecheck); next.Before(until) {
					until = next
				}
			}
			pctx, cancel = context.WithDeadline(ctx, until)
		}
		recs = sess.PollRecords(pctx, left).Records()
		cancel()
		if len(recs) > 0 || !informed || deadline.IsZero() || !time.Now().Before(deadline) || ctx.Err() != nil || !s.onTheirWay() {
			break
		}
	}
	s.noteConsumed(recs)
	s.noteAge(recs)
	// An assignment may have come between the check above and the poll:
	// records of a partition that is not restored must not be decided.
	pending := s.pendingRestores()
	for _, r := range recs {
		if _, ok := pending[r.Partition]; ok {
			return nil, errRestorePending
		}
	}
	return recs, nil
}

// noteAge records how old the polled records are.
func (s *Sequencer) noteAge(recs []*kgo.Record) {
	now := time.Now()
	for _, r := range recs {
		s.m.inputAge.Observe(now.Sub(r.Timestamp).Seconds())
	}
}

// inflightRecheck is how often a transaction waiting for records that
// Config.Inflight says are coming looks at the counts again.
const inflightRecheck = 500 * time.Microsecond

// noteConsumed records how far the session polled each partition.
func (s *Sequencer) noteConsumed(recs []*kgo.Record) {
	if s.cfg.Inflight == nil {
		return
	}
	for _, r := range recs {
		if r.Offset >= s.consumed[r.Partition] {
			s.consumed[r.Partition] = r.Offset + 1
		}
	}
}

// onTheirWay reports whether the producer of this process is writing
// records to a partition this instance owns and has restored, or had
// ones acknowledged past what the session polled of it.
func (s *Sequencer) onTheirWay() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.owned {
		if _, restoring := s.needRestore[p]; restoring {
			continue
		}
		writing, acked := s.cfg.Inflight.Load(p)
		if writing > 0 {
			return true
		}
		if c, ok := s.consumed[p]; ok && acked > c {
			return true
		}
	}
	return false
}

// staleFetch is how quickly a poll returns a fetch that was already
// buffered; a poll that waits for the broker takes longer.
const staleFetch = 200 * time.Microsecond

// errRestorePending aborts a transaction whose batch reached a partition
// that waits for its restore; its records are polled again afterwards.
var errRestorePending = errors.New("a partition of the batch waits for its restore")

// handle decides one input record and produces what follows from it. It
// returns the outcome's name for the metrics; an error only for a store
// failure, which aborts the transaction.
func (s *Sequencer) handle(ctx context.Context, sess *kgo.GroupTransactSession, b *batch, r *kgo.Record) (string, error) {
	schema := header(r, schemas.HeaderSchema)
	if schema == schemas.SchemaDeployV1 {
		return s.deploy(ctx, sess, b, r, schema)
	}
	m, err := schemas.DecodeMutation(schema, r.Value, s.cfg.Limits)
	if err != nil {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.RejectReason(err), Message: err.Error(), Schema: schema, Value: prefix(r.Value)})
		return "rejected", nil
	}
	if org, project, kerr := schemas.ParseProjectKey(r.Key); kerr != nil || org != m.Org || project != m.Project {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonKeyMismatch, Schema: schema, Mutation: m,
			Message: fmt.Sprintf("record key %q is not the project key %q: produce mutations keyed by org/project", r.Key, schemas.ProjectKey(m.Org, m.Project))})
		return "rejected", nil
	}
	if want := schemas.Partition(r.Key, s.partitions); want != r.Partition {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonKeyMismatch, Schema: schema, Mutation: m,
			Message: fmt.Sprintf("project %s/%s belongs to partition %d, not %d: produce with Kafka's default (murmur2) partitioner", m.Org, m.Project, want, r.Partition)})
		return "rejected", nil
	}
	d, err := s.decider.Decide(model.MutationRecord{Mutation: m, Timestamp: r.Timestamp, Partition: r.Partition, Offset: r.Offset})
	if err != nil {
		return "", fmt.Errorf("decide %s/%s client %s id %d: %w", m.Org, m.Project, m.Client, m.ID, err)
	}
	if d.Version != nil {
		// Metadata for the history, outside what the mutators saw: deciding
		// stays deterministic.
		d.Version.DecidedAt = time.Now().UnixMilli()
	}
	switch d.Kind {
	case model.Applied, model.Errored:
		for i := range d.Chunks {
			c := &d.Chunks[i]
			value, hash := schemas.EncodeChunk(c)
			kr := &kgo.Record{Topic: s.cfg.Topics.Versions, Partition: r.Partition, Key: r.Key, Value: value,
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaChunkV1)}, {Key: schemas.HeaderChunkHash, Value: []byte(hash)}}}
			b.pending = append(b.pending, pendingRec{rec: store.Record{Chunk: c}, kr: kr})
			sess.Produce(ctx, kr, b.promise)
		}
		value, err := schemas.EncodeVersion(d.Version, s.cfg.Limits)
		if err != nil {
			return "", fmt.Errorf("encode version %d of %s/%s@%s: %w", d.Version.Version, m.Org, m.Project, m.Branch, err)
		}
		kr := &kgo.Record{Topic: s.cfg.Topics.Versions, Partition: r.Partition, Key: r.Key, Value: value,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaVersionV1)}}}
		b.pending = append(b.pending, pendingRec{rec: store.Record{Version: d.Version}, kr: kr})
		b.versions++
		sess.Produce(ctx, kr, b.promise)
		return d.Kind.String(), nil
	case model.Duplicate:
		return "duplicate", nil
	case model.Gap:
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonGap, Schema: schema, Mutation: m, ExpectedID: d.ExpectedID,
			Message: fmt.Sprintf("mutation id %d of client %s is ahead of the last applied id %d: resend from id %d", m.ID, m.Client, d.LastID, d.ExpectedID)})
		return "gap", nil
	default: // model.Rejected
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: d.Reason, Schema: schema, Mutation: m, Message: d.Message})
		return "rejected", nil
	}
}

func (s *Sequencer) reject(ctx context.Context, sess *kgo.GroupTransactSession, b *batch, r *kgo.Record, rej *schemas.Rejected) {
	rej.Topic, rej.Partition, rej.Offset = r.Topic, r.Partition, r.Offset
	rej.At = r.Timestamp.UnixMilli()
	value, err := schemas.EncodeRejected(rej, s.cfg.Limits)
	if err != nil {
		// A rejection that cannot be encoded (a mutation over a limit):
		// keep the reason and where the record is, drop the rest.
		rej.Mutation, rej.Value = nil, nil
		if value, err = schemas.EncodeRejected(rej, s.cfg.Limits); err != nil {
			s.log.Error("encode rejected record", "err", err, "partition", r.Partition, "offset", r.Offset)
			return
		}
	}
	s.log.Debug("mutation rejected", "reason", rej.Reason, "partition", r.Partition, "offset", r.Offset, "message", rej.Message)
	kr := &kgo.Record{Topic: s.cfg.Topics.Rejected, Partition: r.Partition % s.rejectedPartitions, Key: r.Key, Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaRejectedV1)}}}
	sess.Produce(ctx, kr, b.promise)
	b.rejected = append(b.rejected, rej)
}

// committedEvents are the batch's records of partition p as the
// changelog's events, for Config.Committed.
func (s *Sequencer) committedEvents(b *batch, p int32) []chlog.Event {
	var evs []chlog.Event
	for _, pr := range b.pending {
		if pr.kr.Partition != p {
			continue
		}
		evs = append(evs, chlog.Event{Topic: pr.kr.Topic, Partition: p, Offset: pr.kr.Offset, Timestamp: pr.kr.Timestamp.UnixMilli(),
			Size: len(pr.kr.Value), Version: pr.rec.Version, Chunk: pr.rec.Chunk, Deploy: pr.rec.Deploy})
	}
	slices.SortFunc(evs, func(a, b chlog.Event) int { return cmp.Compare(a.Offset, b.Offset) })
	return evs
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func prefix(b []byte) []byte {
	if len(b) > schemas.MaxRejectedValueBytes {
		return b[:schemas.MaxRejectedValueBytes]
	}
	return b
}

func partitionLabel(p int32) string { return strconv.Itoa(int(p)) }
