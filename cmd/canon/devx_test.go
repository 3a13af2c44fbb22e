package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/client"
)

// pushN pushes n mutations of client c, one push each, waiting for each
// to be applied.
func pushN(t *testing.T, ctx context.Context, p *devProc, c string, n int) {
	t.Helper()
	w := client.New(p.http, client.WithToken(p.token)).Writer("dev", "demo", client.WriterConfig{ClientGroup: "g-" + c, Client: c})
	for i := range n {
		if _, err := w.Add("item.put", map[string]any{"collection": "notes", "id": fmt.Sprint(i), "data": i}); err != nil {
			t.Fatal(err)
		}
		out, err := w.Flush(ctx)
		if err != nil || len(out) != 1 || out[0].Status != client.Applied {
			t.Fatalf("push %d of %s: %+v, %v", i, c, out, err)
		}
	}
}

// The data dir and everything in it (the broker's logs, the store with
// every item body, keys.json, the local ClickHouse's data) is the user's
// only, also when an older canon dev had made the dir readable to all.
func TestDevDataIsPrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildCanon(t)
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o755); err != nil { // whatever the test's umask
		t.Fatal(err)
	}
	p := startDev(t, ctx, bin, data)
	waitReady(t, ctx, p.http)
	pushN(t, ctx, p, "c", 3)
	p.stop(t)

	var open []string
	kinds := map[string]int{}
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		kinds[strings.Split(rel, string(filepath.Separator))[0]]++
		if info.Mode().Perm()&0o077 != 0 {
			open = append(open, fmt.Sprintf("%v %s", info.Mode().Perm(), rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"kafka", "store", "keys.json"} {
		if kinds[sub] == 0 {
			t.Fatalf("no %s under the data dir: %v", sub, kinds)
		}
	}
	if len(open) > 0 {
		t.Fatalf("%d of the data dir's entries are open to others:\n%s", len(open), strings.Join(open, "\n"))
	}
}
