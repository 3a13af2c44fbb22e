package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/pipelines"
	"github.com/canon-sync/canon/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestPipelineCommands runs canon serve (the sequencer) and the pipeline
// commands as processes against the real broker: a rebase killed with
// SIGKILL while it waits for outcomes and run again leaves each mutation
// once on its target; export, import and replay work on the result.
func TestPipelineCommands(t *testing.T) {
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildCanon(t)
	kbrokers, prefix, _ := canontest.Topics(t, nil, 2)
	brokers := strings.Join(kbrokers, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kbrokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ConsumeTopics(prefix+schemas.TopicVersions), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	serve := exec.Command(bin, "serve", "--roles", "sequencer", "--brokers", brokers, "--topic-prefix", prefix,
		"--topic-partitions", "2", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--log-level", "warn")
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var serveOut bytes.Buffer
	serve.Stdout, serve.Stderr = &serveOut, &serveOut
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
		if t.Failed() {
			t.Logf("canon serve:\n%s", serveOut.String())
		}
	}()

	// main: three items; feature from main@3: n puts of two clients;
	// main then deletes t2.
	var recs []*kgo.Record
	add := func(branch, client string, id uint64, name, args string) {
		val, err := schemas.EncodeMutation(&schemas.Mutation{Org: "acme", Project: "cli", Branch: branch, ClientGroup: "g", Client: client,
			ID: id, Name: name, Args: json.RawMessage(args)}, schemas.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: prefix + schemas.TopicMutations, Key: schemas.ProjectKey("acme", "cli"), Value: val,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}}})
	}
	for i := uint64(1); i <= 3; i++ {
		add("main", "a", i, "item.put", fmt.Sprintf(`{"collection":"t","id":"t%d","data":{"i":%d}}`, i, i))
	}
	add("feature", "f", 1, "branch.create", `{"from":"main"}`)
	for i := uint64(1); i <= n; i++ {
		add("feature", fmt.Sprintf("c%d", i%2), (i+1)/2, "item.patch", fmt.Sprintf(`{"collection":"t","id":"t%d","data":{"n":%d}}`, i%3+1, i))
	}
	add("main", "a", 4, "item.delete", `{"collection":"t","id":"t2"}`)
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append(args, "--brokers", brokers, "--topic-prefix", prefix, "--project", "acme/cli")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("canon %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return out, nil
	}
	// Wait for the sequencer: the replay of feature in memory needs its
	// head, and it must be deterministic.
	seen := func(branch string, version uint64) {
		t.Helper()
		canontest.Wait(t, ctx, fmt.Sprintf("%s version %d in the changelog", branch, version), func() (bool, error) {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			found := false
			cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
				v, err := schemas.DecodeVersion(string(r.Headers[0].Value), r.Value, schemas.Limits{})
				if err == nil && v.Branch == branch && v.Version >= version {
					found = true
				}
			})
			return found, nil
		})
	}
	seen("feature", n+1)
	out, err := run("replay", "--branch", "feature", "--in-memory")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "deterministic: every replayed state hash is the original's") {
		t.Fatalf("replay:\n%s", out)
	}

	rebase := []string{"rebase", "--branch", "feature", "--from", "2", "--onto", "main@4", "--into", "rebased", "--json"}
	out, err = run(append(rebase, "--dry-run")...)
	if err != nil {
		t.Fatal(err)
	}
	var dry pipelines.RebaseResult
	if err := json.Unmarshal(out, &dry); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The patches of t2, which main@4 deleted, are the conflicts: i%3 == 1.
	if len(dry.Conflicts) != 667 || dry.Conflicts[0].NewStatus != "error" {
		t.Fatalf("dry run: %d conflicts, first %+v", len(dry.Conflicts), dry.Conflicts[0])
	}
	text, err := run(append(rebase[:len(rebase)-1:len(rebase)-1], "--dry-run")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"dry run of the rebase (nothing produced) of acme/cli@feature versions 2-2001 onto main@4 into acme/cli@rebased:",
		"  versions    2001 (1334 applied, 667 errors, 0 not recorded)",
		"  conflicts   667",
		"    version 2: mutation 1 of client c1 (item.patch): applied, now error: item t/t2 does not exist",
		"    … and 647 more (--json lists them all)",
		"  difference between acme/cli@feature at version 2001 and acme/cli@rebased:\n  only in source t/t2\n",
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the dry run's summary lacks %q:\n%s", want, text)
		}
	}

	// SIGKILL the rebase once the sequencer made the target's first
	// versions, then run it again.
	cmd := exec.Command(bin, append(rebase, "--brokers", brokers, "--topic-prefix", prefix, "--project", "acme/cli")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	seen("rebased", 1)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if err := <-exited; err == nil {
		t.Log("the rebase completed before it was killed")
	} else if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) {
		t.Fatal(err)
	}
	out, err = run(rebase...)
	if err != nil {
		t.Fatal(err)
	}
	var res pipelines.RebaseResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.TargetHead != n+1 || res.Versions != n+1 || res.TargetStateHash != dry.TargetStateHash {
		t.Fatalf("rebase after the kill: head %d versions %d state %s; dry run predicted %s", res.TargetHead, res.Versions, res.TargetStateHash, dry.TargetStateHash)
	}
	t.Logf("the rerun found %d of %d outcomes on the target", res.AlreadyOnTarget, res.Mutations)

	// Export: the target's versions hold each mutation once.
	file := filepath.Join(t.TempDir(), "cli.ndjson")
	if _, err := run("export", "--branch", "rebased", "-o", file); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	once := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var line struct {
			Type    string          `json:"type"`
			Version json.RawMessage `json:"version"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line.Type != "version" {
			continue
		}
		v, err := schemas.DecodeVersion(schemas.SchemaVersionV1, line.Version, schemas.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if v.Branch == "rebased" {
			for _, o := range v.Mutations {
				once[fmt.Sprintf("%s#%d", o.Client, o.ID)]++
			}
		}
	}
	if len(once) != n+1 {
		t.Errorf("the target holds %d distinct mutations, want %d", len(once), n+1)
	}
	for m, c := range once {
		if c != 1 {
			t.Errorf("mutation %s is %d times on the target", m, c)
		}
	}
	// Import the snapshot of the target as a new branch.
	if out, err := run("import", file, "--branch", "restored", "--from", "main@4"); err != nil || !strings.Contains(string(out), "imported rebased@") {
		t.Fatalf("import: %v\n%s", err, out)
	}
}
