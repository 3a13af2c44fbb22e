package pipelines

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"

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
// end offset of the moment it started, applied to an in-memory Pebble
// store (the same store the sequencer decides against) by a
// changelog.Materializer, and the versions kept per branch in changelog
// order. It can go on following the same partitions (and canon.rejected)
// for the outcomes of what a job produces, without missing a record in
// between.
type history struct {
	cfg        Config
	partitions int32
	projects   map[ProjectRef]int32 // project → its partition
	store      *store.Store
	m          *changelog.Materializer
	tail       *changelog.Tail
	branches   map[BranchRef][]*schemas.Version // index i is version i+1
	// order is every version read, in changelog order per partition.
	order []*schemas.Version
	// fresh are the versions the last write to the store added.
	fresh []*schemas.Version
	log   *slog.Logger
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

// readHistory reads the projects' history; with followRejected, the tail
// also follows canon.rejected from its end, for the outcomes of what the
// job will produce.
func readHistory(ctx context.Context, cfg Config, followRejected bool, projects ...ProjectRef) (*history, error) {
	cl, err := cfg.Kafka.Aux("admin").NewClient()
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
	tcfg := changelog.Config{
		Kafka:          cfg.Kafka.Aux("changelog"),
		Topics:         cfg.Topics,
		Partitions:     parts,
		PartitionCount: n,
		Limits:         cfg.Limits,
		Log:            cfg.Log,
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
	// Progress counts offsets read of all the partitions.
	var total int64
	done := map[int32]int64{}
	report := func() {
		var d int64
		for _, o := range done {
			d += o
		}
		cfg.Progress(Progress{Phase: "read", Done: d, Total: total})
	}
	// Read up to the end offsets, not the last stable ones: a sequencer
	// transaction that has just committed (its EndTxn answered, which is
	// when its store shows the versions) may not have its commit marker
	// written yet, and the last stable offset would stop before it. A
	// transaction still open below the end is waited for: it commits or
	// aborts within the transaction timeout.
	var target map[int32]int64
	h.m, err = changelog.NewMaterializer(changelog.MaterializerConfig{
		Tail: tcfg, Sink: historySink{h}, Until: changelog.End, Admin: cl,
		Hooks: changelog.Hooks{
			Started: func(_, t map[int32]int64) {
				target, total = t, 0
				for _, o := range t {
					total += o
				}
				report()
			},
			Applied: func(p int32, next int64, _ int, _ int64) {
				done[p] = min(next, target[p])
				report()
			},
		},
	})
	if err != nil {
		h.store.Close()
		return nil, err
	}
	if err := h.m.Run(ctx); err != nil {
		h.Close()
		return nil, err
	}
	h.tail = h.m.Tail()
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
	if h.m != nil {
		h.m.Close()
	}
	h.store.Close()
}

// take hands events polled from the tail to the materializer, which
// writes the versions and chunks of the history's projects to the store
// and the branches; it returns those versions and the rejected records of
// those projects.
func (h *history) take(evs []changelog.Event) (versions []*schemas.Version, rejected []changelog.Event, err error) {
	h.fresh = nil
	if err := h.m.Take(evs); err != nil {
		return nil, nil, err
	}
	for _, ev := range evs {
		if ev.Rejected != nil {
			if m := ev.Rejected.Mutation; m != nil {
				if _, ok := h.projects[ProjectRef{m.Org, m.Project}]; ok {
					rejected = append(rejected, ev)
				}
			}
		}
	}
	return h.fresh, rejected, nil
}

// knowsScope reports whether a deploy's scope (a project, or with project
// "" an org) covers a project of the history.
func (h *history) knowsScope(org, project string) bool {
	if project != "" {
		_, ok := h.projects[ProjectRef{org, project}]
		return ok
	}
	for p := range h.projects {
		if p.Org == org {
			return true
		}
	}
	return false
}

// historySink is the history as the materializer's sink: the chunks and
// new versions of the history's projects go to the in-memory store, and
// the versions the store took to their branches; other projects' records
// are dropped.
type historySink struct{ h *history }

func (s historySink) Offset(p int32) (int64, bool, error) { return s.h.store.Offset(p) }

func (s historySink) Apply(p int32, recs []store.Record, next int64) error {
	h := s.h
	keep := make([]store.Record, 0, len(recs))
	heads := map[BranchRef]uint64{}
	for _, r := range recs {
		if c := r.Chunk; c != nil {
			if _, ok := h.projects[ProjectRef{c.Org, c.Project}]; ok {
				keep = append(keep, r)
			}
			continue
		}
		if d := r.Deploy; d != nil {
			// The bundle activations of the history's projects (and their
			// orgs'): what in-memory decisions run.
			if h.knowsScope(d.Org, d.Project) {
				keep = append(keep, r)
			}
			continue
		}
		v := r.Version
		if _, ok := h.projects[ProjectRef{v.Org, v.Project}]; !ok {
			continue
		}
		b := BranchRef{ProjectRef{v.Org, v.Project}, v.Branch}
		head, ok := heads[b]
		if !ok {
			head = h.head(b)
		}
		if v.Version <= head {
			continue // the store skips it as well, or refuses a conflict
		}
		heads[b] = v.Version
		keep = append(keep, r)
	}
	if err := h.store.Apply(p, keep, next); err != nil {
		return fmt.Errorf("apply %s[%d] to the in-memory store: %w", h.cfg.Topics.Versions, p, err)
	}
	for _, r := range keep {
		if v := r.Version; v != nil {
			b := BranchRef{ProjectRef{v.Org, v.Project}, v.Branch}
			h.branches[b] = append(h.branches[b], v)
			h.order = append(h.order, v)
			h.fresh = append(h.fresh, v)
		}
	}
	return nil
}

func (s historySink) DropPartition(p int32) error {
	h := s.h
	if err := h.store.DropPartition(p); err != nil {
		return err
	}
	for b := range h.branches {
		if h.projects[b.ProjectRef] == p {
			delete(h.branches, b)
		}
	}
	h.order = slices.DeleteFunc(h.order, func(v *schemas.Version) bool { return h.projects[ProjectRef{v.Org, v.Project}] == p })
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
