package pipelines

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/schemas"
)

// ReplayOptions says what a replay re-runs and where.
type ReplayOptions struct {
	// Source is the branch whose canonical mutations are re-run.
	Source BranchRef
	// From and To are versions of Source (0: 1 and its head).
	From, To uint64
	// Raw, if set, takes the mutations from canon.mutations instead: the
	// records of Source in an offset or time range, with their own args
	// and timestamps.
	Raw *RawRange
	// Into is the target: a branch name (a new branch of Source's project,
	// made from Source at version From-1), or ORG/PROJECT, the main branch
	// of a new project, for a replay from version 1 of a branch that has
	// no base (main). In memory it only names where the decisions are
	// made, which must not exist; by default a new branch canon-replay
	// (canon-replay-2, … if taken), or, from version 1 of main, a project
	// canon-replay of the same org that is not read.
	Into string
	// InMemory decides with Config.Registry in memory and produces
	// nothing; otherwise the mutations go through Kafka and the running
	// sequencers.
	InMemory bool
	// Client is the client of the replay's branch.create (default
	// ReplayClient).
	Client string
}

// RawRange selects records of canon.mutations: offsets of the project's
// partition, or record times.
type RawRange struct {
	// FromOffset is the first offset; ToOffset the one after the last
	// (-1 for either: no bound).
	FromOffset, ToOffset int64
	// Since and Until bound the record timestamps (zero: no bound);
	// Until is exclusive.
	Since, Until time.Time
}

// ReplayResult is the outcome of a replay.
type ReplayResult struct {
	Source   string `json:"source"`
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	Target   string `json:"target"`
	InMemory bool   `json:"inMemory"`
	// FromOffset and ToOffset (exclusive) are the raw range read, for a
	// replay from canon.mutations.
	FromOffset *int64 `json:"fromOffset,omitempty"`
	ToOffset   *int64 `json:"toOffset,omitempty"`
	// Skipped are raw records of the source in the range that made no
	// version (duplicates, gaps, rejections): not re-sent.
	Skipped int `json:"skipped,omitempty"`
	Counts
	// Checked is the number of source versions compared.
	Checked       int         `json:"checked"`
	Deterministic bool        `json:"deterministic"`
	Divergence    *Divergence `json:"divergence,omitempty"`
	ElapsedMS     int64       `json:"elapsedMs"`
}

// Replay re-runs the canonical mutations of a branch onto a new branch
// made from the same base, and checks that every version's state hash
// is the original's.
func Replay(ctx context.Context, cfg Config, opt ReplayOptions) (*ReplayResult, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tool := opt.Client
	if tool == "" {
		tool = ReplayClient
	}
	var target BranchRef
	newProject := false
	switch into := opt.Into; {
	case into == "" && !opt.InMemory:
		return nil, optionErrorf("{Into} is required: a new branch name, or ORG/PROJECT for a new project")
	case into == "":
		// Chosen below, once the range says whether a branch can hold it.
	case strings.Contains(into, "/"):
		p, err := ParseProject(into)
		if err != nil {
			return nil, optionErrorf("{Into}: %w", err)
		}
		if p == opt.Source.ProjectRef {
			return nil, optionErrorf("{Into} %s is the source project: give a new project or a branch name", into)
		}
		target, newProject = BranchRef{p, schemas.DefaultBranch}, true
	default:
		if err := schemas.ValidateBranch("into", into); err != nil {
			return nil, optionErrorf("{Into}: %w", err)
		}
		if into == opt.Source.Branch {
			return nil, optionErrorf("{Into} %s is the source branch: give a new branch name", into)
		}
		target = BranchRef{opt.Source.ProjectRef, into}
	}
	projects := []ProjectRef{opt.Source.ProjectRef}
	if newProject && !opt.InMemory {
		projects = append(projects, target.ProjectRef)
	}
	h, err := readHistory(ctx, cfg, !opt.InMemory, projects...)
	if err != nil {
		return nil, err
	}
	h.setJob(JobReplay)
	defer h.Close()

	res := &ReplayResult{Source: opt.Source.String(), InMemory: opt.InMemory}
	var steps []step
	var from, to uint64
	if opt.Raw != nil {
		var lo, hi int64
		steps, lo, hi, res.Skipped, err = h.rawSteps(ctx, opt.Source, *opt.Raw)
		if err != nil {
			return nil, err
		}
		res.FromOffset, res.ToOffset = &lo, &hi
		from, to = steps[0].orig.version, steps[len(steps)-1].orig.version
	} else {
		if from, to, err = h.versionRange(opt.Source, opt.From, opt.To); err != nil {
			return nil, err
		}
	}
	if v1 := h.version(opt.Source, 1); from == 1 && v1.Base != nil {
		// Version 1 is the source's branch.create: the replay's own
		// branch.create from the same state stands for it.
		if from = 2; to < 2 {
			return nil, fmt.Errorf("version 1 of %s is its branch.create and nothing follows in the range: replay from version 2", opt.Source)
		}
	}
	if opt.Into == "" {
		// In memory: a name the history does not hold; the project is
		// not read, so it starts empty.
		if from == 1 {
			target, newProject = BranchRef{ProjectRef{opt.Source.Org, "canon-replay"}, schemas.DefaultBranch}, true
			if target.ProjectRef == opt.Source.ProjectRef {
				target.Project = "canon-replay-2"
			}
		} else {
			target = BranchRef{opt.Source.ProjectRef, "canon-replay"}
			for i := 2; h.head(target) > 0; i++ {
				target.Branch = fmt.Sprintf("canon-replay-%d", i)
			}
		}
	}
	if opt.InMemory && !newProject && h.head(target) > 0 {
		return nil, optionErrorf("%s exists; an in-memory replay decides on a new branch: give another {Into}, or none", target)
	}
	h.register(target.ProjectRef)
	if newProject && opt.InMemory {
		// The in-memory target starts empty, whatever Kafka holds.
		delete(h.branches, target)
	}
	res.Target = target.String()
	var base *BranchAt
	switch {
	case from == 1 && !newProject:
		return nil, optionErrorf("%s starts from the empty state at version 1, and a branch cannot: replay into a new project with {Into} ORG/PROJECT, or from a later {From}", opt.Source)
	case from > 1 && newProject:
		return nil, optionErrorf("a replay from version %d starts from %s at version %d, which only a branch of the project can start from: give {Into} BRANCH", from, opt.Source, from-1)
	case from > 1:
		base = &BranchAt{Branch: opt.Source.Branch, Version: from - 1}
	}
	res.From, res.To = from, to

	var plan []step
	if base != nil {
		plan = append(plan, createStep(target, tool, *base, h.version(opt.Source, from-1).TS))
	}
	if opt.Raw != nil {
		shift := h.lastIDs(opt.Source, from-1)
		for _, s := range steps {
			if s.orig.version < from {
				continue
			}
			if s.m.Client == tool {
				return nil, optionErrorf("client %s of the source is the job's own client name: rename the job's client ({Client})", tool)
			}
			s.m.Org, s.m.Project, s.m.Branch = target.Org, target.Project, target.Branch
			s.m.ID = s.orig.outcome.ID - shift[s.m.Client]
			plan = append(plan, s)
		}
	} else {
		src, err := h.sourceSteps(opt.Source, from, to, target, tool)
		if err != nil {
			return nil, err
		}
		plan = append(plan, src...)
	}
	if err := h.checkTarget(target, plan, base); err != nil {
		return nil, err
	}
	results, existing, err := h.run(ctx, target, plan, opt.InMemory)
	if err != nil {
		return nil, err
	}
	if err := ownStepsDecided(plan, results, target); err != nil {
		return nil, err
	}
	res.Counts = count(results, existing)
	for _, s := range plan {
		if s.orig != nil && s.orig.last {
			res.Checked++
		}
	}
	res.Divergence = firstDivergence(plan, results)
	res.Deterministic = res.Divergence == nil
	res.ElapsedMS = time.Since(start).Milliseconds()
	return res, nil
}

// rawSteps reads the records of src in a range of canon.mutations and
// makes a step of each that the source recorded in a version (with the
// source's branch and ids: the caller retargets and renumbers them). It returns the offsets read
// and how many records of src made no version.
func (h *history) rawSteps(ctx context.Context, src BranchRef, rng RawRange) ([]step, int64, int64, int, error) {
	type at struct {
		v *schemas.Version
		k int
	}
	recorded := map[int64]at{}
	for _, v := range h.branches[src] {
		for k, o := range v.Mutations {
			recorded[o.Offset] = at{v, k}
		}
	}
	topic := h.cfg.Topics.Mutations
	p := h.projects[src.ProjectRef]
	admCl, err := h.cfg.Kafka.Aux("raw").NewClient()
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	lookup := func(what string) func(kadm.ListedOffsets, error) (int64, error) {
		return func(l kadm.ListedOffsets, err error) (int64, error) {
			if err != nil {
				return 0, fmt.Errorf("list %s offsets of %s: %w", what, topic, err)
			}
			o, ok := l.Lookup(topic, p)
			if !ok {
				return 0, fmt.Errorf("list %s offsets of %s: partition %d is missing", what, topic, p)
			}
			if o.Err != nil {
				return 0, fmt.Errorf("list %s offsets of %s[%d]: %w", what, topic, p, o.Err)
			}
			return o.Offset, nil
		}
	}
	first, err := lookup("start")(adm.ListStartOffsets(ctx, topic))
	if err != nil {
		return nil, 0, 0, 0, err
	}
	end, err := lookup("end")(adm.ListEndOffsets(ctx, topic))
	if err != nil {
		return nil, 0, 0, 0, err
	}
	lo, hi := first, end
	if !rng.Since.IsZero() {
		if lo, err = lookup("time")(adm.ListOffsetsAfterMilli(ctx, rng.Since.UnixMilli(), topic)); err != nil {
			return nil, 0, 0, 0, err
		}
	}
	if !rng.Until.IsZero() {
		if hi, err = lookup("time")(adm.ListOffsetsAfterMilli(ctx, rng.Until.UnixMilli(), topic)); err != nil {
			return nil, 0, 0, 0, err
		}
	}
	if rng.FromOffset >= 0 {
		lo = max(lo, rng.FromOffset)
	}
	if rng.ToOffset >= 0 {
		hi = min(hi, rng.ToOffset)
	}
	lo, hi = max(lo, first), min(hi, end)
	if lo >= hi {
		return nil, lo, hi, 0, optionErrorf("%s[%d] has no records in the range [%d, %d) (it holds offsets %d to %d): check {Raw.FromOffset}, {Raw.ToOffset}, {Raw.Since} and {Raw.Until}", topic, p, lo, hi, first, end-1)
	}
	cl, err := h.cfg.Kafka.Aux("raw").NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(lo)}}),
		kgo.FetchMaxBytes(64<<20),
	)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer cl.Close()
	var steps []step
	skipped := 0
	next := lo
	for next < hi {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, 0, 0, 0, err
		}
		if err := fs.Err0(); err != nil {
			return nil, 0, 0, 0, fmt.Errorf("read %s[%d]: %w", topic, p, err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if ferr != nil || r.Offset >= hi {
				next = max(next, r.Offset+1)
				return
			}
			next = r.Offset + 1
			var schema string
			for _, hd := range r.Headers {
				if hd.Key == schemas.HeaderSchema {
					schema = string(hd.Value)
				}
			}
			m, err := schemas.DecodeMutation(schema, r.Value, h.cfg.Limits)
			if err != nil || m.Org != src.Org || m.Project != src.Project {
				return // not the source's: another project's, or never decided
			}
			branch := m.Branch
			if branch == "" {
				branch = schemas.DefaultBranch
			}
			if branch != src.Branch {
				return
			}
			a, ok := recorded[r.Offset]
			if !ok {
				skipped++
				return
			}
			o := a.v.Mutations[a.k]
			if o.Client != m.Client || o.ID != m.ID {
				ferr = optionErrorf("%s[%d] offset %d holds mutation %d of client %s, but version %d of %s records mutation %d of client %s there: the topics do not belong together (check {Config.Topics})",
					topic, p, r.Offset, m.ID, m.Client, a.v.Version, src, o.ID, o.Client)
				return
			}
			steps = append(steps, step{
				m:    resent(o, m.ID, m.Args, src),
				ts:   r.Timestamp.UTC(),
				orig: &origin{src: src, version: a.v.Version, outcome: o, last: a.k == len(a.v.Mutations)-1, stateHash: a.v.StateHash, items: a.v.Items, bundle: a.v.Bundle},
			})
			steps[len(steps)-1].m.Name = m.Name
		})
		if ferr != nil {
			return nil, 0, 0, 0, ferr
		}
		h.cfg.Progress(Progress{Phase: "read", Done: next - lo, Total: hi - lo})
	}
	if len(steps) == 0 {
		return nil, lo, hi, skipped, fmt.Errorf("no record of %s in %s[%d] offsets [%d, %d) made a version (%d made none)", src, topic, p, lo, hi, skipped)
	}
	return steps, lo, hi, skipped, nil
}
