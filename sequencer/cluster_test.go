package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/testenv"
)

// canonLeaders counts, per broker, the partitions of Canon's topics it
// leads.
func canonLeaders(t *testing.T, ctx context.Context, e *topicsEnv) map[int32]int {
	t.Helper()
	md, err := kadm.NewClient(e.cl).Metadata(ctx, e.names.Mutations, e.names.Versions, e.names.Rejected)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int{}
	for _, td := range md.Topics {
		for _, pd := range td.Partitions {
			if pd.Err == nil && pd.Leader >= 0 {
				leaders[pd.Leader]++
			}
		}
	}
	return leaders
}

// checkReplicated checks that EnsureTopics made Canon's topics replicated
// on the cluster (3 replicas, 2 in sync, no unclean election), and that it
// refuses a topic whose min.insync.replicas was lowered to 1.
func checkReplicated(t *testing.T, ctx context.Context, e *topicsEnv) {
	t.Helper()
	adm := kadm.NewClient(e.cl)
	md, err := adm.Metadata(ctx, e.names.Versions)
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range md.Topics[e.names.Versions].Partitions {
		if len(pd.Replicas) != 3 {
			t.Fatalf("%s[%d] has replicas %v, want 3", e.names.Versions, pd.Partition, pd.Replicas)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, e.names.Versions)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
	for _, c := range rcs[0].Configs {
		if w, ok := want[c.Key]; ok && (c.Value == nil || *c.Value != w) {
			t.Fatalf("%s: %s=%v, want %s", e.names.Versions, c.Key, c.Value, w)
		}
	}
	set := func(v string) {
		t.Helper()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr(v)}}, e.names.Rejected)
		if err == nil {
			_, err = resp.On(e.names.Rejected, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A config change reaches each node through the metadata log, and
	// EnsureTopics may ask a node that has not applied it yet: wait for
	// the answer the change brings, either way.
	ensure := func() error {
		_, err := kafka.EnsureTopics(ctx, e.cl, kafka.TopicsConfig{Names: e.names, Partitions: e.parts}, nil)
		return err
	}
	set("1")
	var refused error
	canontest.Wait(t, ctx, "EnsureTopics to refuse min.insync.replicas=1 on 3 replicas", func() (bool, error) {
		refused = ensure()
		if refused != nil && !errors.Is(refused, kafka.ErrUnsafeTopic) {
			return false, fmt.Errorf("EnsureTopics: %w, want ErrUnsafeTopic", refused)
		}
		return refused != nil, nil
	})
	t.Logf("refused: %v", refused)
	set("2")
	canontest.Wait(t, ctx, "EnsureTopics to take min.insync.replicas=2 again", func() (bool, error) {
		err := ensure()
		if err != nil && !errors.Is(err, kafka.ErrUnsafeTopic) {
			return false, err
		}
		return err == nil, nil
	})
}

// TestIntegrationCluster runs two sequencers under load on a three-node
// KRaft cluster (replication factor 3, min.insync.replicas 2, no unclean
// election). First the node that leads most of Canon's partitions is
// killed with SIGKILL and restarted: leaders move and decisions go on.
// Then two nodes are killed at once: an acknowledged write is no longer
// possible, and once they are back everything produced is decided. In
// both, nothing acknowledged is lost or decided twice.
func TestIntegrationCluster(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("integration test skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	cluster, err := testenv.StartKafkaCluster(ctx, testenv.KafkaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the cluster's logs:\n%s", cluster.Tail(30))
		}
	})
	t.Logf("three-node cluster started in %.1fs", time.Since(begin).Seconds())

	e := newTopicsEnv(t, cluster.Brokers(), 6)
	checkReplicated(t, ctx, e)
	// A topic of its own, replicated as Canon's, shows later that no
	// write is acknowledged with two nodes down; a first write to every
	// partition shows that it takes them otherwise.
	probeTopic := e.prefix + "probe"
	if _, err := kadm.NewClient(e.cl).CreateTopic(ctx, e.parts, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, probeTopic); err != nil {
		t.Fatal(err)
	}
	for p := range e.parts {
		e.produceSync(t, &kgo.Record{Topic: probeTopic, Partition: p, Value: []byte("before")})
	}
	cl := followChangelog(t, e)
	g := newLoadGen(t, e, 24, 60, 20, 11)
	a, b := newSeqProc(t, e, "a"), newSeqProc(t, e, "b")
	a.Start(ctx)
	b.Start(ctx)
	startLoad(t, ctx, g, cl)
	canontest.Wait(t, ctx, "both owning partitions", func() (bool, error) { return a.owned() > 0 && b.owned() > 0, nil })

	// The leader of most of Canon's partitions dies under load.
	g.allowUpTo(0.3)
	g.waitProduced(ctx, 0.3)
	leaders := canonLeaders(t, ctx, e)
	var leader int32
	for id, n := range leaders {
		if n > leaders[leader] {
			leader = id
		}
	}
	t.Logf("node %d, leader of %d of Canon's partitions (%v), killed", leader, leaders[leader], leaders)
	cluster.Node(leader).Kill()
	before := cl.outcomes()
	g.allowUpTo(0.5)
	canontest.Wait(t, ctx, "decisions with the leader dead", func() (bool, error) { return cl.outcomes() > before+100, nil })
	if err := cluster.Node(leader).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d restarted", leader)
	g.allowUpTo(0.6)
	g.waitProduced(ctx, 0.6)

	// Two nodes die at once: no write can reach min.insync.replicas.
	down := []int32{leader, leader%testenv.ClusterSize + 1}
	var wg sync.WaitGroup
	for _, id := range down {
		wg.Go(cluster.Node(id).Kill)
	}
	wg.Wait()
	t.Logf("nodes %v killed at once", down)
	g.allowUpTo(0.8) // buffered by the producer until the nodes are back
	// The surviving leader holds an acks=all write until the request
	// times out, since its in-sync replicas cannot shrink without a
	// controller quorum; the others cannot be reached.
	probe, err := kgo.NewClient(kgo.SeedBrokers(cluster.Brokers()...), kgo.RecordRetries(0),
		kgo.ProduceRequestTimeout(2*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	// Writes are tried for 20s: none may be acknowledged. A record in a
	// produce request is not failed by a deadline (the broker may still
	// take it), so the promises are awaited only that long.
	type result struct {
		p   int32
		err error
	}
	results := make(chan result, e.parts)
	for p := range e.parts {
		probe.Produce(ctx, &kgo.Record{Topic: probeTopic, Partition: p, Value: []byte("probe")}, func(r *kgo.Record, err error) {
			results <- result{r.Partition, err}
		})
	}
	deadline := time.After(20 * time.Second)
probing:
	for range e.parts {
		select {
		case r := <-results:
			if r.err == nil {
				t.Fatalf("a write to %s[%d] was acknowledged with two of three nodes down", probeTopic, r.p)
			}
			t.Logf("write to %s[%d] with two nodes down: %v", probeTopic, r.p, r.err)
		case <-deadline:
			break probing
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	t.Log("no write is acknowledged with two nodes down")
	for _, id := range down {
		wg.Go(func() {
			if err := cluster.Node(id).Restart(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("nodes %v restarted", down)

	finishAndCheck(t, ctx, e, g, cl, a, b)
}
