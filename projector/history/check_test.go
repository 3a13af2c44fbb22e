package history

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// workload is a history of many clients over several projects: item puts
// (some of them large, so stored as chunks with large args), patches,
// splices, deletes, scalar changes, errors (patches of missing items,
// unknown mutators) and a branch per project.
func workload(t testing.TB, projects, clients, perClient int, seed uint64) []mut {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	base := time.Date(2026, 5, 4, 8, 0, 0, 0, time.UTC)
	var out []mut
	at := base
	type obj = map[string]any
	for step := range perClient {
		for pi := range projects {
			project := fmt.Sprintf("p%02d", pi)
			for ci := range clients {
				client := fmt.Sprintf("%s-c%d", project, ci)
				id := uint64(step + 1)
				item := fmt.Sprintf("i%d", rng.IntN(6))
				var name string
				var args any
				switch r := rng.IntN(100); {
				case step == 0 || r < 30:
					name, args = "item.put", obj{"collection": "c", "id": client + "-" + item, "meta": obj{"n": step},
						"data": obj{"text": fmt.Sprintf("step %d of %s", step, client)}}
				case r < 40:
					name, args = "item.put", obj{"collection": "big", "id": client, "data": obj{"body": bigText(rng, 6000+rng.IntN(20000))}}
				case r < 60:
					name, args = "item.patch", obj{"collection": "c", "id": client + "-" + item, "data": obj{"n": step}}
				case r < 70:
					name, args = "item.splice", obj{"collection": "big", "id": client, "path": "/body", "index": 0, "insert": "x"}
				case r < 80:
					name, args = "project.set", obj{fmt.Sprintf("s%d", rng.IntN(4)): step}
				case r < 85:
					name, args = "project.set", obj{fmt.Sprintf("s%d", rng.IntN(4)): nil}
				case r < 93:
					name, args = "item.delete", obj{"collection": "c", "id": client + "-" + item}
				default:
					name, args = "custom.unknown", obj{"step": step}
				}
				at = at.Add(time.Duration(1+rng.IntN(3000)) * time.Millisecond)
				out = append(out, mut{at: at, Mutation: schemas.Mutation{Org: "acme", Project: project, Branch: "main",
					ClientGroup: "g-" + client, Client: client, ID: id, Name: name, Args: mustJSON(t, args),
					TS: at.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond).UnixMilli(), Principal: "user:" + client,
					ReceivedAt: at.UnixMilli() - 5}})
			}
			if step == perClient/2 {
				// A branch from main's head, and a scalar set on it.
				client := project + "-brancher"
				for i, m := range []struct {
					name string
					args any
				}{{"branch.create", obj{"from": "main"}}, {"project.set", obj{"s0": "branch"}}} {
					at = at.Add(time.Millisecond)
					out = append(out, mut{at: at, Mutation: schemas.Mutation{Org: "acme", Project: project, Branch: "b1",
						ClientGroup: "g-" + client, Client: client, ID: uint64(i + 1), Name: m.name, Args: mustJSON(t, m.args),
						Principal: "user:" + client}})
				}
			}
		}
	}
	return out
}

func bigText(rng *mrand.Rand, n int) string {
	const words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu "
	var b strings.Builder
	for b.Len() < n {
		i := rng.IntN(len(words) - 8)
		b.WriteString(words[i : i+8])
	}
	return b.String()
}

// checkTables compares the history tables, deduplicated, with what the
// changelog holds: every version, mutation, item change and scalar change
// once, none missing, none extra, and the new chunk bytes per project.
func checkTables(t *testing.T, ctx context.Context, f *fixture, c changelogContent) {
	t.Helper()
	var wantV, wantM, wantI, wantS [][]string
	scalars := map[string]map[string]json.RawMessage{} // project/branch/version → scalars
	newBytes := map[string]int64{}
	activity := map[string]int{}
	for _, v := range c.versions {
		p := v.Org + "/" + v.Project
		sc, _ := json.Marshal(v.Scalars)
		wantV = append(wantV, []string{v.Org, v.Project, v.Branch, fmt.Sprint(v.Version), fmt.Sprint(v.Parent), v.StateHash,
			string(sc), fmt.Sprint(len(v.Items)), fmt.Sprint(len(v.Mutations))})
		for i, o := range v.Mutations {
			wantM = append(wantM, []string{v.Org, v.Project, v.Branch, fmt.Sprint(v.Version), fmt.Sprint(i), o.Client,
				fmt.Sprint(o.ID), o.Name, o.Status, o.Error})
			activity[p+" "+o.Client]++
		}
		for _, it := range v.Items {
			wantI = append(wantI, []string{v.Org, v.Project, v.Branch, fmt.Sprint(v.Version), it.Collection, it.ID, it.Op,
				it.Hash, fmt.Sprint(it.Size), fmt.Sprint(len(it.Chunks))})
		}
		prevKey := fmt.Sprintf("%s/%s/%d", p, v.Branch, v.Version-1)
		if v.Base != nil {
			prevKey = fmt.Sprintf("%s/%s/%d", p, v.Base.Branch, v.Base.Version)
		}
		prev := scalars[prevKey]
		for name, val := range v.Scalars {
			if old, ok := prev[name]; !ok || string(old) != string(val) {
				wantS = append(wantS, []string{p, v.Branch, fmt.Sprint(v.Version), name, "set", string(val), string(old)})
			}
		}
		for name, old := range prev {
			if _, ok := v.Scalars[name]; !ok {
				wantS = append(wantS, []string{p, v.Branch, fmt.Sprint(v.Version), name, "delete", "", string(old)})
			}
		}
		scalars[fmt.Sprintf("%s/%s/%d", p, v.Branch, v.Version)] = v.Scalars
	}
	for p, b := range c.chunkBytes {
		newBytes[p] = b
	}
	db := f.db
	expectRows(t, "versions", queryStrings(t, ctx, f,
		"SELECT org, project, branch, version, parent, state_hash, scalars, items_changed, mutations FROM "+db+".versions FINAL"), wantV)
	expectRows(t, "mutations", queryStrings(t, ctx, f,
		"SELECT org, project, branch, version, seq, client, mutation_id, name, status, error FROM "+db+".mutations FINAL"), wantM)
	expectRows(t, "item_changes", queryStrings(t, ctx, f,
		"SELECT org, project, branch, version, collection, item_id, op, hash, size, chunks FROM "+db+".item_changes FINAL"), wantI)
	expectRows(t, "scalar_changes", queryStrings(t, ctx, f,
		"SELECT concat(org, '/', project), branch, version, name, op, value, previous FROM "+db+".scalar_changes FINAL"), wantS)

	var wantB [][]string
	for p, b := range newBytes {
		wantB = append(wantB, []string{p, fmt.Sprint(b)})
	}
	expectRows(t, "new bytes per project", queryStrings(t, ctx, f,
		"SELECT concat(org, '/', project), sum(new_bytes) FROM "+db+".versions FINAL GROUP BY org, project HAVING sum(new_bytes) > 0"), wantB)
	var wantA [][]string
	for k, n := range activity {
		wantA = append(wantA, append(strings.Fields(k), fmt.Sprint(n)))
	}
	expectRows(t, "client_activity_daily", queryStrings(t, ctx, f,
		"SELECT concat(org, '/', project), client, uniqExactMerge(mutations) FROM "+db+".client_activity_daily GROUP BY org, project, client"), wantA)
}

// expectRows compares two sets of rows in any order and reports what is
// missing and what is extra (duplicates count).
func expectRows(t *testing.T, what string, got, want [][]string) {
	t.Helper()
	key := func(r []string) string { return strings.Join(r, "\x1f") }
	count := map[string]int{}
	for _, r := range want {
		count[key(r)]++
	}
	for _, r := range got {
		count[key(r)]--
	}
	var missing, extra []string
	for k, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, strings.ReplaceAll(k, "\x1f", " | "))
		}
		for ; n < 0; n++ {
			extra = append(extra, strings.ReplaceAll(k, "\x1f", " | "))
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: %d rows, want %d; %d missing (first: %v), %d extra (first: %v)",
			what, len(got), len(want), len(missing), first(missing, 3), len(extra), first(extra, 3))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
