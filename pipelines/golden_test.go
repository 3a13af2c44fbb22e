package pipelines

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// TestGolden runs the replay and rebase scenarios of testdata/golden, one
// file per scenario, each on a write path of its own on the real broker
// (go test -rewrite rewrites the expected outputs). The registry holds
// the built-ins and two test mutators: note.stamp, which counts its calls
// and so decides differently on a replay, and note.now, which writes
// tx.Now() (deterministic as long as a replay keeps the records'
// timestamps).
//
// Directives:
//
//	push [project=org/name]
//	<branch> <client> <id> <name> <args>   (one mutation a line, in order)
//	wait <branch>=<version> ...
//	replay source=<branch> [from=N] [to=N] [into=X] [in-memory] [raw=FROM-TO | raw=since-push]
//	rebase source=<branch> from=N (onto=<branch>@<v> | onto-snapshot) into=X [dry-run] [principal=P]
//	store branch=X version=N
//	lineage target=X source=Y versions=N principal=P
//	export branch=X
//	import target=org/name@branch [from=<branch>]
//	deploy                  (the input is a mutator bundle: deployed for the project)
//	bundle name=X           (the input is a mutator bundle, kept for rebase mutators=X)
//	rebase … mutators=X     (decides the dry run with bundle X)
//	bundles branch=X        (the bundle each version of X names)
//
// Hashes print as h1, h2, … in the order they first appear in the file,
// so that the outputs show which states are equal without depending on
// the hash function. A directive's error prints as "error: …".
func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/golden", func(t *testing.T, path string) {
		ctx := testCtx(t)
		g := &golden{e: newEnv(t, goldenRegistry(t)), project: ProjectRef{"acme", "roadmap"}, hashes: map[string]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := g.run(t, ctx, d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func goldenRegistry(t testing.TB) *model.Registry {
	var calls atomic.Int64
	reg := model.NewRegistry()
	if err := reg.Register("note.stamp", func(tx model.Tx, _ json.RawMessage) error {
		n := calls.Add(1)
		return tx.Put("notes", "stamp", model.Item{Data: json.RawMessage(fmt.Sprintf(`{"calls":%d}`, n))})
	}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("note.now", func(tx model.Tx, _ json.RawMessage) error {
		return tx.Put("notes", "now", model.Item{Data: json.RawMessage(fmt.Sprintf(`{"at":%d}`, tx.Now().UnixMilli()))})
	}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// golden is the state of one scenario file.
type golden struct {
	e       *env
	project ProjectRef
	pushed  time.Time // before the first push
	started time.Time // before the last rebase that was not a dry run
	snap    *Snapshot // of the last export
	hashes  map[string]string
	bundles map[string]string // by name: bundle directives' sources
}

// h names a hash by the order of its first appearance; "-" is none.
func (g *golden) h(hash string) string {
	if hash == "" {
		return "-"
	}
	if n, ok := g.hashes[hash]; ok {
		return n
	}
	n := "h" + strconv.Itoa(len(g.hashes)+1)
	g.hashes[hash] = n
	return n
}

func (g *golden) branch(name string) BranchRef { return BranchRef{g.project, name} }

func (g *golden) run(t *testing.T, ctx context.Context, d *datadriven.TestData) (string, error) {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	flag := func(k string) bool { _, ok := args[k]; return ok }
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(args[k], 10, 64)
		if args[k] != "" && err != nil {
			d.Fatalf(t, "%s=%q: %v", k, args[k], err)
		}
		return v
	}
	var b strings.Builder
	switch d.Cmd {
	case "push":
		if p, ok := args["project"]; ok {
			ref, err := ParseProject(p)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			g.project = ref
		}
		if g.pushed.IsZero() {
			g.pushed = time.Now()
		}
		var ms []mut
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.SplitN(line, " ", 5)
			if len(f) != 5 {
				d.Fatalf(t, "want <branch> <client> <id> <name> <args>: %q", line)
			}
			id, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				d.Fatalf(t, "id of %q: %v", line, err)
			}
			ms = append(ms, mut{f[0], f[1], id, f[3], f[4]})
		}
		g.e.push(t, ctx, g.project, ms...)
		fmt.Fprintf(&b, "pushed %d\n", len(ms))
	case "wait":
		for _, a := range d.CmdArgs {
			v, err := strconv.ParseUint(a.Vals[0], 10, 64)
			if err != nil {
				d.Fatalf(t, "%s: %v", a, err)
			}
			g.e.waitHead(t, ctx, g.branch(a.Key), v)
			fmt.Fprintf(&b, "%s at version %d\n", a.Key, v)
		}
	case "replay":
		opt := ReplayOptions{Source: g.branch(args["source"]), From: num("from"), To: num("to"), Into: args["into"], InMemory: flag("in-memory")}
		if raw, ok := args["raw"]; ok {
			opt.Raw = &RawRange{FromOffset: -1, ToOffset: -1}
			if raw == "since-push" {
				opt.Raw.Since = g.pushed.Add(-time.Second)
			} else if from, to, ok := strings.Cut(raw, "-"); ok {
				var err1, err2 error
				opt.Raw.FromOffset, err1 = strconv.ParseInt(from, 10, 64)
				if to != "end" {
					opt.Raw.ToOffset, err2 = strconv.ParseInt(to, 10, 64)
				}
				if err1 != nil || err2 != nil {
					d.Fatalf(t, "raw=%s: want FROM-TO, FROM-end or since-push", raw)
				}
			}
		}
		res, err := Replay(ctx, g.e.cfg, opt)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s versions %d-%d into %s", res.Source, res.From, res.To, res.Target)
		if res.InMemory {
			b.WriteString(" in memory")
		}
		fmt.Fprintf(&b, "\nchecked %d, skipped %d\n", res.Checked, res.Skipped)
		g.counts(&b, res.Counts)
		if res.Deterministic {
			b.WriteString("deterministic\n")
		}
		if dv := res.Divergence; dv != nil {
			m := dv.Mutation
			fmt.Fprintf(&b, "divergence at version %d (target version %d): %s#%d %s: %s%s, replayed %s%s\n",
				dv.Version, dv.TargetVersion, m.Client, m.ID, m.Name, dv.Status, errSuffix(dv.Error), dv.ReplayedStatus, errSuffix(dv.ReplayedError))
			fmt.Fprintf(&b, "  state %s, replayed %s\n", g.h(dv.StateHash), g.h(dv.ReplayedStateHash))
			if dv.Item != nil {
				g.item(&b, "  ", *dv.Item)
			}
			if dv.Scalars {
				b.WriteString("  scalars differ\n")
			}
		}
	case "rebase":
		opt := RebaseOptions{Source: g.branch(args["source"]), From: num("from"), To: num("to"), Into: args["into"], DryRun: flag("dry-run")}
		if onto, ok := args["onto"]; ok {
			at, err := ParseBranchAt(onto)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			opt.Onto = &at
		}
		if flag("onto-snapshot") {
			if g.snap == nil {
				d.Fatalf(t, "onto-snapshot before any export")
			}
			opt.OntoSnapshot, opt.OntoName = g.snap, g.snap.Branch+".ndjson"
		}
		cfg := g.e.cfg
		cfg.Principal = args["principal"]
		if name, ok := args["mutators"]; ok {
			src, ok := g.bundles[name]
			if !ok {
				d.Fatalf(t, "mutators=%s: no bundle of that name", name)
			}
			set, err := cfg.Bundles.Compile([]byte(src))
			if err != nil {
				return "", err
			}
			cfg.Mutators = set
		}
		before := g.e.mutationsEnd(t, ctx)
		if !opt.DryRun {
			g.started = time.Now()
		}
		res, err := Rebase(ctx, cfg, opt)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s versions %d-%d onto %s into %s", res.Source, res.From, res.To, res.Onto, res.Target)
		if res.DryRun {
			b.WriteString(" (dry run)")
		}
		b.WriteString("\n")
		g.counts(&b, res.Counts)
		for _, c := range res.Conflicts {
			m := c.Mutation
			fmt.Fprintf(&b, "conflict: version %d %s#%d %s: %s%s, now %s%s\n", c.Version, m.Client, m.ID, m.Name,
				c.Status, errSuffix(c.Error), c.NewStatus, errSuffix(c.NewError))
		}
		for _, s := range res.Diff.Scalars {
			fmt.Fprintf(&b, "scalar %s: source %s, target %s\n", s.Name, s.Source, s.Target)
		}
		for _, it := range res.Diff.Items {
			g.item(&b, "", it)
		}
		fmt.Fprintf(&b, "source state %s, target head %d, target state %s\n", g.h(res.SourceStateHash), res.TargetHead, g.h(res.TargetStateHash))
		if res.DryRun {
			fmt.Fprintf(&b, "records written: %d\n", g.e.mutationsEnd(t, ctx)-before)
		}
	case "store":
		br := g.branch(args["branch"])
		g.e.waitHead(t, ctx, br, num("version"))
		st, err := g.e.store.Latest(br.Org, br.Project, br.Branch)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s at version %d, state %s\n", br, st.Version, g.h(st.StateHash))
	case "lineage":
		checkLineage(t, ctx, g.e.cfg, g.branch(args["target"]), g.branch(args["source"]), args["principal"], num("versions"), g.started)
		b.WriteString("every version records the job; every re-sent mutation its origin\n")
	case "export":
		var buf bytes.Buffer
		res, err := Export(ctx, g.e.cfg, ExportOptions{Project: g.project, Branch: args["branch"]}, &buf)
		if err != nil {
			return "", err
		}
		if g.snap, err = ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s: versions %d, items %d, snapshot %s, state %s\n", res.Project, res.Versions, res.Items, res.Snapshot, g.h(g.snap.StateHash))
	case "import":
		opt := ImportOptions{Snapshot: g.snap}
		p, br, _ := strings.Cut(args["target"], "@")
		ref, err := ParseProject(p)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		opt.Target = BranchRef{ref, br}
		if from, ok := args["from"]; ok {
			opt.From = &BranchAt{Branch: from}
		}
		res, err := Import(ctx, g.e.cfg, opt)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s from %q\n", res.Target, res.From)
		g.counts(&b, res.Counts)
		fmt.Fprintf(&b, "target head %d, state %s; snapshot state %s; matches %t\n", res.TargetHead, g.h(res.TargetStateHash), g.h(res.SnapshotStateHash), res.Matches)
	case "deploy":
		src := d.Input + "\n"
		dep := &schemas.Deploy{Org: g.project.Org, Project: g.project.Project, Hash: schemas.BundleHash([]byte(src)), Bundle: src, DeployedAt: 1}
		v, err := schemas.EncodeDeploy(dep)
		if err != nil {
			return "", err
		}
		key := schemas.DeployKey(dep.Org, dep.Project)
		rec := &kgo.Record{Topic: g.e.Topics.Mutations, Key: key, Value: v, Partition: schemas.Partition(key, g.e.Partitions),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}}
		if err := g.e.Client.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "deployed %s for %s\n", g.h(dep.Hash), g.project)
	case "bundle":
		if g.bundles == nil {
			g.bundles = map[string]string{}
		}
		g.bundles[args["name"]] = d.Input + "\n"
		fmt.Fprintf(&b, "bundle %s is %s\n", args["name"], g.h(schemas.BundleHash([]byte(d.Input+"\n"))))
	case "bundles":
		br := g.branch(args["branch"])
		vs, err := g.e.store.Versions(br.Org, br.Project, br.Branch, 1, 1000)
		if err != nil {
			return "", err
		}
		for _, v := range vs {
			fmt.Fprintf(&b, "version %d %s: bundle %s\n", v.Version, v.Mutations[0].Name, g.h(v.Bundle))
		}
	default:
		d.Fatalf(t, "unknown directive %s", d.Cmd)
	}
	return b.String(), nil
}

func (g *golden) counts(b *strings.Builder, c Counts) {
	fmt.Fprintf(b, "mutations %d, already on target %d, versions %d, applied %d, errors %d, rejected %d\n",
		c.Mutations, c.AlreadyOnTarget, c.Versions, c.Applied, c.Errors, c.Rejected)
}

func (g *golden) item(b *strings.Builder, indent string, it ItemDiff) {
	fmt.Fprintf(b, "%sitem %s/%s %s: source %s %s, target %s %s\n", indent, it.Collection, it.ID, it.Change,
		g.h(it.SourceHash), orNone(it.SourceMeta), g.h(it.TargetHash), orNone(it.TargetMeta))
}

func orNone(meta json.RawMessage) string {
	if len(meta) == 0 {
		return "-"
	}
	return string(meta)
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}
