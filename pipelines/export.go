package pipelines

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// ExportOptions says what to export.
type ExportOptions struct {
	Project ProjectRef
	// Branch and At name the snapshot written after the history (default
	// main at its head).
	Branch string
	At     uint64
	// NoHistory writes the snapshot only.
	NoHistory bool
}

// ExportResult counts what an export wrote.
type ExportResult struct {
	Project  string `json:"project"`
	Versions int    `json:"versions"`
	Bodies   int    `json:"bodies"`
	Snapshot string `json:"snapshot"`
	Items    int    `json:"items"`
	Bytes    int64  `json:"bytes"`
}

// Export writes a project's history as NDJSON: a header, then every
// version of every branch in changelog order (with its mutations and
// outcomes), each preceded by the bodies it refers to that were not
// written yet (item bodies and large args, by hash), then the snapshot
// of one branch at one version: its scalars and items, which canon
// import and canon rebase --onto-snapshot read. docs/pipelines.md
// describes the lines.
func Export(ctx context.Context, cfg Config, opt ExportOptions, w io.Writer) (*ExportResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	branch := opt.Branch
	if branch == "" {
		branch = schemas.DefaultBranch
	}
	h, err := readHistory(ctx, cfg, false, opt.Project)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	src := BranchRef{opt.Project, branch}
	at := opt.At
	head := h.head(src)
	switch {
	case head == 0:
		return nil, optionErrorf("branch %s has no versions in %s: check {Project}, {Branch} and {Config.Topics}", src, cfg.Topics.Versions)
	case at > head:
		return nil, optionErrorf("{At} %d: branch %s has versions 1 to %d", at, src, head)
	case at == 0:
		at = head
	}
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	enc := json.NewEncoder(bw)
	res := &ExportResult{Project: opt.Project.String(), Snapshot: fmt.Sprintf("%s@%d", branch, at)}
	hd := headerLine{Type: LineHeader, Format: ExportFormat, FormatVersion: ExportFormatVersion,
		Org: opt.Project.Org, Project: opt.Project.Project, ExportedAt: time.Now().UnixMilli(), History: !opt.NoHistory}
	for b, vs := range h.branches {
		hd.Branches = append(hd.Branches, BranchAtOut{Name: b.Branch, Version: uint64(len(vs))})
	}
	slices.SortFunc(hd.Branches, func(a, b BranchAtOut) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if err := enc.Encode(hd); err != nil {
		return nil, err
	}
	written := map[string]bool{}
	body := func(hash string) error {
		if written[hash] {
			return nil
		}
		b, err := h.store.Blob(opt.Project.Org, opt.Project.Project, hash)
		if err != nil {
			return fmt.Errorf("body %s: %w", hash, err)
		}
		written[hash] = true
		res.Bodies++
		return enc.Encode(bodyLine{Type: LineBody, Hash: hash, Data: b})
	}
	if !opt.NoHistory {
		for i, v := range h.order {
			for _, ch := range v.Items {
				if ch.Op == schemas.OpPut {
					if err := body(ch.Hash); err != nil {
						return nil, err
					}
				}
			}
			for _, o := range v.Mutations {
				if o.ArgsRef != nil {
					if err := body(o.ArgsRef.Hash); err != nil {
						return nil, err
					}
				}
			}
			raw, err := schemas.EncodeVersion(v, cfg.Limits)
			if err != nil {
				return nil, fmt.Errorf("encode version %d of %s@%s: %w", v.Version, opt.Project, v.Branch, err)
			}
			if err := enc.Encode(versionLine{Type: LineVersion, Version: raw}); err != nil {
				return nil, err
			}
			res.Versions++
			if i%256 == 0 {
				cfg.Progress(Progress{Phase: "export", Done: int64(i + 1), Total: int64(len(h.order))})
			}
		}
	}
	st, err := h.store.StateAt(opt.Project.Org, opt.Project.Project, branch, at, false)
	if err != nil {
		return nil, err
	}
	var items []itemLine
	for _, c := range slices.Sorted(maps.Keys(st.Collections)) {
		for _, r := range st.Collections[c] {
			if err := body(r.Hash); err != nil {
				return nil, err
			}
			items = append(items, itemLine{Type: LineItem, Collection: c, ID: r.ID, Meta: r.Meta, Hash: r.Hash})
		}
	}
	if err := enc.Encode(snapshotLine{Type: LineSnapshot, Branch: branch, Version: at, TS: st.TS, StateHash: st.StateHash, Scalars: st.Scalars, Items: len(items)}); err != nil {
		return nil, err
	}
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return nil, err
		}
	}
	res.Items = len(items)
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	res.Bytes = cw.n
	return res, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
