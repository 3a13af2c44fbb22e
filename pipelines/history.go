package pipelines

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// ProjectRef names a project.
type ProjectRef struct{ Org, Project string }

func (p ProjectRef) String() string { return p.Org + "/" + p.Project }

// BranchRef names a branch of a project.
type BranchRef struct {
	ProjectRef
	Branch string
}

func (b BranchRef) String() string { return b.ProjectRef.String() + "@" + b.Branch }

// history is what a job read of canon.versions: every version and chunk of
// the projects it asked for, from the start of their partitions to the
// last stable offset of the moment it started, applied to an in-memory
// Pebble store (the same store the sequencer decides against), and the
// versions kept per branch in changelog order. It can go on following the
// same partitions (and canon.rejected) for the outcomes of what a job
// produces, without missing a record in between.
type history struct {
	cfg        Config
	partitions int32
	projects   map[ProjectRef]int32 // project → its partition
	store      *store.Store
	tail       *changelog.Tail
	branches   map[BranchRef][]*schemas.Version // index i is version i+1
	// order is every version read, in changelog order per partition.
	order   []*schemas.Version
	pending map[int32][]store.Record
	log     *slog.Logger
	// job is what the job's mutations record of it (see Config.Principal).
	job *schemas.Job
}

// Job kinds recorded in the mutations a job sends.
const (
	JobRebase = "rebase"
	JobReplay = "replay"
	JobImport = "import"
)

// setJob records the job's kind, principal and start time.
func (h *history) setJob(kind string) {
	h.job = &schemas.Job{Kind: kind, Principal: h.cfg.Principal, At: time.Now().UnixMilli()}
}

// applyBatch is how many changelog records are applied to the in-memory
// store at once.
const applyBatch = 2000

// readHistory reads the projects' history; with followRejected, the tail
// also follows canon.rejected from its end, for the outcomes of what the
// job will produce.
func readHistory(ctx context.Context, cfg Config, followRejected bool, projects ...ProjectRef) (*history, error) {
	opts, err := cfg.Kafka.Aux("admin").Opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	counts, err := partitionCounts(ctx, adm, cfg.Topics.Mutations, cfg.Topics.Versions, cfg.Topics.Rejected)
	if err != nil {
		return nil, err
	}
	n := counts[cfg.Topics.Versions]
	if m := counts[cfg.Topics.Mutations]; m != n {
		return nil, fmt.Errorf("%s has %d partitions and %s %d: they must be equal (see canon topics)", cfg.Topics.Mutations, m, cfg.Topics.Versions, n)
	}
	h := &history{
		cfg:        cfg,
		partitions: n,
		projects:   map[ProjectRef]int32{},
		branches:   map[BranchRef][]*schemas.Version{},
		pending:    map[int32][]store.Record{},
		log:        cfg.Log,
	}
	var parts []int32
	seen := map[int32]bool{}
	for _, p := range projects {
		pp := schemas.Partition(schemas.ProjectKey(p.Org, p.Project), n)
		h.projects[p] = pp
		if !seen[pp] {
			seen[pp] = true
			parts = append(parts, pp)
		}
	}
	starts, err := adm.ListStartOffsets(ctx, cfg.Topics.Versions)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", cfg.Topics.Versions, err)
	}
	// Read up to the end offsets, not the last stable ones: a sequencer
	// transaction that has just committed (its EndTxn answered, which is
	// when its store shows the versions) may not have its commit marker
	// written yet, and the last stable offset would stop before it. A
	// transaction still open below the end is waited for: it commits or
	// aborts within the transaction timeout.
	ends, err := adm.ListEndOffsets(ctx, cfg.Topics.Versions)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", cfg.Topics.Versions, err)
	}
	end := map[int32]int64{}
	var total int64
	for _, p := range parts {
		s, ok1 := starts.Lookup(cfg.Topics.Versions, p)
		e, ok2 := ends.Lookup(cfg.Topics.Versions, p)
		if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
			return nil, fmt.Errorf("list offsets of %s[%d]: %w", cfg.Topics.Versions, p, errors.Join(s.Err, e.Err))
		}
		if s.Offset > 0 {
			return nil, fmt.Errorf("%s[%d] starts at offset %d: its first records were deleted, so the history is incomplete (Canon's topics need infinite retention)", cfg.Topics.Versions, p, s.Offset)
		}
		end[p] = e.Offset
		total += e.Offset
	}
	tcfg := changelog.Config{
		Kafka:          cfg.Kafka.Aux("changelog"),
		Topics:         cfg.Topics,
		Partitions:     parts,
		PartitionCount: n,
		Start:          map[int32]int64{},
		Limits:         cfg.Limits,
		Log:            cfg.Log,
	}
	for _, p := range parts {
		tcfg.Start[p] = 0
	}
	if followRejected {
		rends, err := adm.ListCommittedOffsets(ctx, cfg.Topics.Rejected)
		if err != nil {
			return nil, fmt.Errorf("list stable offsets of %s: %w", cfg.Topics.Rejected, err)
		}
		tcfg.Rejected, tcfg.RejectedPartitions, tcfg.RejectedStart = true, counts[cfg.Topics.Rejected], map[int32]int64{}
		for _, p := range parts {
			if o, ok := rends.Lookup(cfg.Topics.Rejected, p); ok && o.Err == nil {
				tcfg.RejectedStart[p] = o.Offset
			}
		}
	}
	if h.store, err = store.Open(store.Config{Dir: "history", FS: vfs.NewMem(), Partitions: n, CacheSize: 8 << 20}); err != nil {
		return nil, err
	}
	if h.tail, err = changelog.New(tcfg); err != nil {
		h.store.Close()
		return nil, err
	}
	caughtUp := func() (done int64, ok bool) {
		ok = true
		for _, p := range parts {
			next, _ := h.tail.Next(cfg.Topics.Versions, p)
			if next < end[p] {
				ok = false
				done += next
			} else {
				done += end[p]
			}
		}
		return done, ok
	}
	for {
		done, ok := caughtUp()
		cfg.Progress(Progress{Phase: "read", Done: done, Total: total})
		if ok {
			break
		}
		evs, err := h.tail.Poll(ctx)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("read %s: %w", cfg.Topics.Versions, err)
		}
		if _, _, err := h.take(evs); err != nil {
			h.Close()
			return nil, err
		}
	}
	if err := h.flush(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func partitionCounts(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		td, ok := tds[t]
		if !ok {
			return nil, fmt.Errorf("topic %s does not exist: check --brokers and --topic-prefix", t)
		}
		if td.Err != nil {
			return nil, fmt.Errorf("topic %s: %w (check --brokers and --topic-prefix)", t, td.Err)
		}
		out[t] = int32(len(td.Partitions))
	}
	return out, nil
}

// Close releases the tail and the in-memory store.
func (h *history) Close() {
	h.tail.Close()
	h.store.Close()
}

// take keeps the events of the history's projects: versions and chunks go
// to the store (in batches) and to the branches; it returns the versions
// and the rejected records of those projects.
func (h *history) take(evs []changelog.Event) (versions []*schemas.Version, rejected []changelog.Event, err error) {
	for _, ev := range evs {
		switch {
		case ev.Err != nil:
			h.log.Warn("undecodable changelog record skipped", "topic", ev.Topic, "partition", ev.Partition, "offset", ev.Offset, "err", ev.Err)
		case ev.Rejected != nil:
			if m := ev.Rejected.Mutation; m != nil {
				if _, ok := h.projects[ProjectRef{m.Org, m.Project}]; ok {
					rejected = append(rejected, ev)
				}
			}
		case ev.Chunk != nil:
			if _, ok := h.projects[ProjectRef{ev.Chunk.Org, ev.Chunk.Project}]; ok {
				h.pending[ev.Partition] = append(h.pending[ev.Partition], store.Record{Chunk: ev.Chunk})
			}
		case ev.Version != nil:
			v := ev.Version
			if _, ok := h.projects[ProjectRef{v.Org, v.Project}]; !ok {
				continue
			}
			b := BranchRef{ProjectRef{v.Org, v.Project}, v.Branch}
			if v.Version <= uint64(len(h.branches[b])) {
				continue // the store skips it as well, or refuses a conflict
			}
			h.branches[b] = append(h.branches[b], v)
			h.order = append(h.order, v)
			h.pending[ev.Partition] = append(h.pending[ev.Partition], store.Record{Version: v})
			versions = append(versions, v)
		}
	}
	n := 0
	for _, recs := range h.pending {
		n += len(recs)
	}
	if n >= applyBatch {
		err = h.flush()
	}
	return versions, rejected, err
}

// flush applies the pending records to the store.
func (h *history) flush() error {
	for p, recs := range h.pending {
		if len(recs) == 0 {
			continue
		}
		next, _ := h.tail.Next(h.cfg.Topics.Versions, p)
		if err := h.store.Apply(p, recs, next); err != nil {
			return fmt.Errorf("apply %s[%d] to the in-memory store: %w", h.cfg.Topics.Versions, p, err)
		}
		h.pending[p] = recs[:0]
	}
	return nil
}

// head is a branch's latest version; 0 when it does not exist.
func (h *history) head(b BranchRef) uint64 { return uint64(len(h.branches[b])) }

// version returns version v of a branch, or nil.
func (h *history) version(b BranchRef, v uint64) *schemas.Version {
	vs := h.branches[b]
	if v == 0 || v > uint64(len(vs)) {
		return nil
	}
	return vs[v-1]
}

// lastIDs are the clients' last mutation ids on a branch after version v.
func (h *history) lastIDs(b BranchRef, v uint64) map[string]uint64 {
	out := map[string]uint64{}
	for i, ver := range h.branches[b] {
		if uint64(i) >= v {
			break
		}
		for c, id := range ver.LastIDs {
			out[c] = id
		}
	}
	return out
}

// args returns the arguments of an outcome, from the chunks of its
// argsRef when they were too large to be inline.
func (h *history) args(p ProjectRef, o *schemas.Outcome) ([]byte, error) {
	if o.ArgsRef == nil {
		return o.Args, nil
	}
	b, err := h.store.Blob(p.Org, p.Project, o.ArgsRef.Hash)
	if err != nil {
		return nil, fmt.Errorf("args %s of mutation %d of client %s: %w", o.ArgsRef.Hash, o.ID, o.Client, err)
	}
	return b, nil
}
