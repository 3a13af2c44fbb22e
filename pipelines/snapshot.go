package pipelines

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// Export files are NDJSON: one JSON object per line, its "type" first.
const (
	// ExportFormat names the format in the header line.
	ExportFormat = "canon-export"
	// ExportFormatVersion is the format's version; readers refuse others.
	ExportFormatVersion = 1
)

// Line types of an export file.
const (
	LineHeader   = "header"
	LineBody     = "body"
	LineVersion  = "version"
	LineSnapshot = "snapshot"
	LineItem     = "item"
)

// headerLine is the first line of an export file.
type headerLine struct {
	Type          string        `json:"type"`
	Format        string        `json:"format"`
	FormatVersion int           `json:"formatVersion"`
	Org           string        `json:"org"`
	Project       string        `json:"project"`
	ExportedAt    int64         `json:"exportedAt"`
	Branches      []BranchAtOut `json:"branches"`
	History       bool          `json:"history"`
}

// BranchAtOut is a branch and its head, as exported.
type BranchAtOut struct {
	Name    string `json:"name"`
	Version uint64 `json:"version"`
}

// bodyLine is a body (an item's or large args') by its hash: canonical
// JSON, which is what the hash is of.
type bodyLine struct {
	Type string          `json:"type"`
	Hash string          `json:"hash"`
	Data json.RawMessage `json:"data"`
}

// versionLine is a version/v1 record as canon.versions holds it, with its
// mutations and their outcomes.
type versionLine struct {
	Type    string          `json:"type"`
	Version json.RawMessage `json:"version"`
}

// snapshotLine starts a branch's state at a version; its item lines
// follow.
type snapshotLine struct {
	Type      string                     `json:"type"`
	Branch    string                     `json:"branch"`
	Version   uint64                     `json:"version"`
	TS        int64                      `json:"ts"`
	StateHash string                     `json:"stateHash,omitempty"`
	Scalars   map[string]json.RawMessage `json:"scalars"`
	Items     int                        `json:"items"`
}

type itemLine struct {
	Type       string          `json:"type"`
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Meta       json.RawMessage `json:"meta"`
	Hash       string          `json:"hash"`
}

// Snapshot is a state to import or to rebase onto: scalars and items
// with their bodies.
type Snapshot struct {
	// Org, Project, Branch and Version say where it was exported from.
	Org, Project, Branch string
	Version              uint64
	// StateHash, when the file has one, is checked against the items and
	// scalars.
	StateHash string
	Scalars   map[string]json.RawMessage
	Items     []SnapshotItem // sorted by (collection, id)
}

// SnapshotItem is one item of a snapshot.
type SnapshotItem struct {
	Collection, ID string
	Meta           json.RawMessage // canonical JSON object
	Hash           string
	Data           json.RawMessage // canonical JSON, hashing to Hash
}

// ReadSnapshot reads the last snapshot of an export file (canon export
// writes one after the history). It reads r twice: once for the
// snapshot's items and once for their bodies.
func ReadSnapshot(r io.ReadSeeker) (*Snapshot, error) {
	var (
		snap  *Snapshot
		items []SnapshotItem
		want  int
	)
	err := eachLine(r, func(n int, typ string, line []byte) error {
		switch typ {
		case LineHeader:
			var hd headerLine
			if err := json.Unmarshal(line, &hd); err != nil {
				return err
			}
			if hd.Format != ExportFormat || hd.FormatVersion != ExportFormatVersion {
				return fmt.Errorf("format %q version %d: this build reads %s version %d", hd.Format, hd.FormatVersion, ExportFormat, ExportFormatVersion)
			}
			snap = &Snapshot{Org: hd.Org, Project: hd.Project}
		case LineSnapshot:
			if snap == nil {
				return errors.New("a snapshot before the header")
			}
			var sl snapshotLine
			if err := json.Unmarshal(line, &sl); err != nil {
				return err
			}
			snap.Branch, snap.Version, snap.StateHash, snap.Scalars = sl.Branch, sl.Version, sl.StateHash, sl.Scalars
			if snap.Scalars == nil {
				snap.Scalars = map[string]json.RawMessage{}
			}
			items, want = items[:0], sl.Items
		case LineItem:
			if snap == nil || snap.Branch == "" {
				return errors.New("an item before any snapshot line")
			}
			var il itemLine
			if err := json.Unmarshal(line, &il); err != nil {
				return err
			}
			if err := schemas.ValidateCollection("collection", il.Collection); err != nil {
				return err
			}
			if err := schemas.ValidateItemID("id", il.ID); err != nil {
				return err
			}
			if err := schemas.ValidateHash("hash", il.Hash); err != nil {
				return fmt.Errorf("item %s/%s: %w", il.Collection, il.ID, err)
			}
			meta := il.Meta
			if len(meta) == 0 || string(meta) == "null" {
				meta = json.RawMessage("{}")
			}
			c, err := model.Canonical(meta)
			if err != nil || c[0] != '{' {
				return fmt.Errorf("item %s/%s: meta must be a JSON object", il.Collection, il.ID)
			}
			items = append(items, SnapshotItem{Collection: il.Collection, ID: il.ID, Meta: c, Hash: il.Hash})
		case LineBody, LineVersion:
		default:
			return fmt.Errorf("unknown line type %q: this build reads %s, %s, %s, %s and %s", typ, LineHeader, LineBody, LineVersion, LineSnapshot, LineItem)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, fmt.Errorf("not a %s file: no header line", ExportFormat)
	}
	if snap.Branch == "" {
		return nil, ErrNoSnapshot
	}
	if len(items) != want {
		return nil, fmt.Errorf("the snapshot announces %d items and the file holds %d: it is truncated", want, len(items))
	}
	need := map[string]bool{}
	for _, it := range items {
		need[it.Hash] = true
	}
	bodies := map[string]json.RawMessage{}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	err = eachLine(r, func(_ int, typ string, line []byte) error {
		if typ != LineBody {
			return nil
		}
		var bl bodyLine
		if err := json.Unmarshal(line, &bl); err != nil {
			return err
		}
		if !need[bl.Hash] {
			return nil
		}
		c, err := model.Canonical(bl.Data)
		if err != nil {
			return fmt.Errorf("body %s: %w", bl.Hash, err)
		}
		if got := model.BodyHash(c); got != bl.Hash {
			return fmt.Errorf("body %s: its canonical JSON hashes to %s: the file is corrupt or was edited", bl.Hash, got)
		}
		bodies[bl.Hash] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	var sum schemas.StateHasher
	for i := range items {
		it := &items[i]
		if it.Data = bodies[it.Hash]; it.Data == nil {
			return nil, fmt.Errorf("item %s/%s: the file has no body line for hash %s", it.Collection, it.ID, it.Hash)
		}
		sum.Add(schemas.ItemDigest(it.Collection, it.ID, it.Meta, it.Hash))
	}
	slices.SortFunc(items, func(a, b SnapshotItem) int {
		if c := strings.Compare(a.Collection, b.Collection); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := 1; i < len(items); i++ {
		if items[i].Collection == items[i-1].Collection && items[i].ID == items[i-1].ID {
			return nil, fmt.Errorf("item %s/%s is in the snapshot twice", items[i].Collection, items[i].ID)
		}
	}
	for name, v := range snap.Scalars {
		if err := schemas.ValidateScalarName("scalars", name); err != nil {
			return nil, err
		}
		c, err := model.Canonical(v)
		if err != nil {
			return nil, fmt.Errorf("scalar %s: %w", name, err)
		}
		snap.Scalars[name] = c
	}
	if snap.StateHash != "" {
		h, err := sum.StateHash(snap.Scalars)
		if err != nil {
			return nil, err
		}
		if h != snap.StateHash {
			return nil, fmt.Errorf("the snapshot's items and scalars hash to %s, not to its stateHash %s: the file is corrupt or was edited (remove stateHash to import an edited snapshot)", h, snap.StateHash)
		}
	}
	snap.Items = items
	return snap, nil
}

// eachLine calls fn with every non-empty line and its type; errors name
// the line.
func eachLine(r io.Reader, fn func(n int, typ string, line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var t struct {
				Type string `json:"type"`
			}
			if jerr := json.Unmarshal(line, &t); jerr != nil {
				return fmt.Errorf("line %d: %w", n, jerr)
			}
			if ferr := fn(n, t.Type, line); ferr != nil {
				return fmt.Errorf("line %d: %w", n, ferr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// snapshotSteps are the mutations of the tool client, ids from firstID,
// that turn the state base (nil: the empty state) into the snapshot's: a
// project.set of the scalars that differ (null removes one), then, in
// (collection, id) order, an item.delete of each item the snapshot lacks
// and an item.put of each that is new or differs.
func snapshotSteps(base *store.State, snap *Snapshot, target BranchRef, tool string, firstID uint64, ts time.Time) []step {
	var ms []step
	id := firstID
	add := func(name string, args any) {
		b, err := json.Marshal(args)
		if err != nil {
			panic(fmt.Sprintf("pipeline: marshal %s args: %v", name, err)) // maps of raw JSON
		}
		ms = append(ms, step{m: schemas.Mutation{
			Org: target.Org, Project: target.Project, Branch: target.Branch,
			ClientGroup: DefaultClientGroup, Client: tool, ID: id, Name: name, Args: b,
		}, ts: ts})
		id++
	}
	var baseScalars map[string]json.RawMessage
	baseItems := map[[2]string]model.ItemRef{}
	if base != nil {
		baseScalars = base.Scalars
		for _, refs := range base.Collections {
			for _, r := range refs {
				baseItems[[2]string{r.Collection, r.ID}] = r
			}
		}
	}
	set := map[string]json.RawMessage{}
	for name, v := range snap.Scalars {
		if !bytes.Equal(baseScalars[name], v) {
			set[name] = v
		}
	}
	for name := range baseScalars {
		if _, ok := snap.Scalars[name]; !ok {
			set[name] = json.RawMessage("null")
		}
	}
	if len(set) > 0 {
		add(model.ProjectSet, set)
	}
	type op struct {
		key [2]string
		put *SnapshotItem
	}
	var ops []op
	in := map[[2]string]bool{}
	for i := range snap.Items {
		it := &snap.Items[i]
		k := [2]string{it.Collection, it.ID}
		in[k] = true
		if r, ok := baseItems[k]; ok && r.Hash == it.Hash && bytes.Equal(r.Meta, it.Meta) {
			continue
		}
		ops = append(ops, op{key: k, put: it})
	}
	for k := range baseItems {
		if !in[k] {
			ops = append(ops, op{key: k})
		}
	}
	slices.SortFunc(ops, func(a, b op) int {
		if c := strings.Compare(a.key[0], b.key[0]); c != 0 {
			return c
		}
		return strings.Compare(a.key[1], b.key[1])
	})
	for _, o := range ops {
		if o.put == nil {
			add(model.ItemDelete, map[string]string{"collection": o.key[0], "id": o.key[1]})
			continue
		}
		add(model.ItemPut, map[string]any{"collection": o.put.Collection, "id": o.put.ID, "meta": o.put.Meta, "data": o.put.Data})
	}
	return ms
}
