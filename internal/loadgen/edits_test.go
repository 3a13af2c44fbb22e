package loadgen

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/testenv"
)

func TestDocsOf(t *testing.T) {
	for _, tc := range []struct {
		clients, projects, client int
		want                      []int
	}{
		{8, 4, 5, []int{1}},
		{8, 8, 7, []int{7}},
		{8, 20, 3, []int{3, 11, 19}},
		{8, 20, 4, []int{4, 12}},
		{8, 100, 0, []int{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96}},
	} {
		c := Config{Clients: tc.clients, Projects: tc.projects}
		if got := c.docsOf(tc.client); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%d clients, %d projects: client %d writes %v, want %v", tc.clients, tc.projects, tc.client, got, tc.want)
		}
	}
	// Every document has a writer.
	c := Config{Clients: 8, Projects: 100}
	seen := map[int]int{}
	for i := range c.Clients {
		for _, d := range c.docsOf(i) {
			seen[d]++
		}
	}
	if len(seen) != 100 {
		t.Errorf("%d of 100 documents have a writer", len(seen))
	}
}

// TestEditSource: one edit of the writer's own field per push, round
// robin over its documents, and the same again from a second source (what
// the baseline relies on).
func TestEditSource(t *testing.T) {
	c := Config{Workload: WorkloadEdits, Clients: 8, Projects: 20}
	a, b := c.newSource(3), c.newSource(3)
	var docs []int
	for n := range 6 {
		p, q := a.next(), b.next()
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("push %d: two sources made %+v and %+v", n, p, q)
		}
		if len(p.ops) != 1 || p.ops[0].name != "item.patch" {
			t.Fatalf("push %d is %+v, want one item.patch", n, p.ops)
		}
		var args struct {
			Collection, ID string
			Data           map[string]int
		}
		if err := json.Unmarshal(p.ops[0].args, &args); err != nil {
			t.Fatal(err)
		}
		if args.Collection != editCollection || args.ID != editItem || !reflect.DeepEqual(args.Data, map[string]int{"c3": n}) {
			t.Fatalf("push %d patches %s", n, p.ops[0].args)
		}
		docs = append(docs, p.doc)
	}
	if want := []int{3, 11, 19, 3, 11, 19}; !reflect.DeepEqual(docs, want) {
		t.Errorf("documents %v, want %v", docs, want)
	}
}

func TestPacer(t *testing.T) {
	start := time.Unix(1000, 0)
	c := Config{Clients: 8, Rate: 200} // 25 pushes/s per client: every 40ms
	p := c.newPacer(start)
	if d := p.wait(start); d != 0 {
		t.Errorf("first push waits %s, want 0", d)
	}
	if d := p.wait(start.Add(10 * time.Millisecond)); d != 30*time.Millisecond {
		t.Errorf("second push 10ms in waits %s, want 30ms", d)
	}
	if d := p.wait(start.Add(200 * time.Millisecond)); d > 0 {
		t.Errorf("a late push waits %s, want none", d)
	}
	closed := (&Config{Clients: 8}).newPacer(start)
	for range 3 {
		if d := closed.wait(start); d != 0 {
			t.Errorf("without a rate a push waits %s", d)
		}
	}
}

func TestEditsConfig(t *testing.T) {
	c := Config{Brokers: []string{"b"}, Canon: "c", Workload: WorkloadEdits, Projects: 100, Batch: 10}
	if err := c.Validate(); err != nil {
		t.Fatalf("edits over 100 documents without ClickHouse: %v", err)
	}
	if c.Batch != 1 {
		t.Errorf("edits workload batch %d, want 1", c.Batch)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Brokers: []string{"b"}, Canon: "c", Workload: "bogus"}, "pass mix or edits"},
		{Config{Brokers: []string{"b"}, Canon: "c", Workload: WorkloadEdits, Rate: -1}, "negative"},
		{Config{Brokers: []string{"b"}, Canon: "c", Projects: 9}, "or --workload edits"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// TestRunEdits runs the edits workload tiny against the real broker, more
// documents than writers and paced, and checks that every edit applied
// and reached its document's websocket, that the baseline got the same
// records, and that the broker's CPU was measured.
func TestRunEdits(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real broker")
	}
	k := testenv.NewKafka(t)
	bin := filepath.Join(t.TempDir(), "canon")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/canon-sync/canon/cmd/canon").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const clients, perClient = 3, 12
	rep, err := Run(ctx, Config{
		Brokers: k.Brokers, Canon: bin, Workload: WorkloadEdits,
		Clients: clients, Projects: 5, Mutations: perClient, Rate: 100, Partitions: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	const total = clients * perClient
	c, raw := rep.Canon, rep.Raw
	if c.Mutations != total || c.Applied != total || c.Pushes != total {
		t.Errorf("%d pushes decided %d (applied %d, errors %d, duplicates %d), want %d pushes of one applied edit", c.Pushes, c.Mutations, c.Applied, c.Errors, c.Duplicates, total)
	}
	if c.WebsocketMutations != total || c.PushToWebsocket.N != total {
		t.Errorf("websockets showed %d mutations (%d latencies), want %d", c.WebsocketMutations, c.PushToWebsocket.N, total)
	}
	if raw.Records != total || raw.Consumed != total {
		t.Errorf("baseline produced %d and consumed %d records, want %d", raw.Records, raw.Consumed, total)
	}
	// 12 pushes per client at 100/s over 3 clients take at least 11 × 30ms.
	if c.Elapsed < 330*time.Millisecond || raw.Elapsed < 300*time.Millisecond {
		t.Errorf("paced runs took %s (Canon) and %s (baseline), want at least 330ms", c.Elapsed, raw.Elapsed)
	}
	if c.CPU <= 0 {
		t.Errorf("canon's CPU time %s", c.CPU)
	}
	if brokerPID(k.Brokers) == 0 {
		t.Logf("the broker's process is not on this machine (%s): its CPU is not measured", k.Provider)
	} else if c.BrokerCPU <= 0 || raw.BrokerCPU <= 0 {
		t.Errorf("the local broker's CPU time: %s during Canon's run, %s during the baseline; want both measured", c.BrokerCPU, raw.BrokerCPU)
	}
}

// TestBrokerPID: the process listening on a loopback port is found (here
// the test itself), and none for a port nobody listens on.
func TestBrokerPID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if got := brokerPID([]string{addr}); got != os.Getpid() {
		t.Errorf("brokerPID(%s) = %d, want this process %d", addr, got, os.Getpid())
	}
	l.Close()
	if got := brokerPID([]string{addr}); got != 0 {
		t.Errorf("brokerPID(%s) after close = %d, want 0", addr, got)
	}
	if got := brokerPID([]string{"kafka.example:9092"}); got != 0 {
		t.Errorf("brokerPID of a remote broker = %d, want 0", got)
	}
}
