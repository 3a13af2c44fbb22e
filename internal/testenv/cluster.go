package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KafkaCluster is a KRaft cluster of three combined broker and controller
// nodes started by StartKafkaCluster, with the settings a production
// cluster keeps acknowledged data with: replication factor 3,
// min.insync.replicas 2, no unclean leader election. Failure tests kill
// and restart its nodes.
type KafkaCluster struct {
	// Nodes are the nodes in node id order: Nodes[i] has node id i+1.
	Nodes []*KafkaServer
}

// ClusterSize is the number of nodes of a KafkaCluster.
const ClusterSize = 3

// Brokers returns the seed addresses of every node.
func (c *KafkaCluster) Brokers() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Brokers()...)
	}
	return out
}

// Node returns the node of a broker id.
func (c *KafkaCluster) Node(id int32) *KafkaServer { return c.Nodes[id-1] }

// Stop stops every node and removes its data.
func (c *KafkaCluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(n.Stop)
	}
	wg.Wait()
}

// Tail returns the last n lines of every node's log.
func (c *KafkaCluster) Tail(n int) string {
	var b strings.Builder
	for i, node := range c.Nodes {
		fmt.Fprintf(&b, "----- node %d -----\n%s\n", i+1, node.Tail(n))
	}
	return b.String()
}

// clusterProps are the settings of a replicated cluster.
var clusterProps = map[string]string{
	"default.replication.factor":                       "3",
	"min.insync.replicas":                              "2",
	"unclean.leader.election.enable":                   "false",
	"offsets.topic.replication.factor":                 "3",
	"transaction.state.log.replication.factor":         "3",
	"transaction.state.log.min.isr":                    "2",
	"share.coordinator.state.topic.replication.factor": "3",
	"share.coordinator.state.topic.min.isr":            "2",
	// A killed node's partitions move at once: the controller fences a
	// broker that misses heartbeats for this long.
	"broker.session.timeout.ms":    "3000",
	"broker.heartbeat.interval.ms": "500",
	// Transactions a crash left open are aborted soon after their
	// timeout.
	"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
	"num.io.threads":      "2",
	"num.network.threads": "2",
}

// StartKafkaCluster starts a three-node KRaft cluster as local processes.
// The caller stops it.
func StartKafkaCluster(ctx context.Context, opts KafkaOptions) (*KafkaCluster, error) {
	if p := opts.Provider; p != "" && p != ProviderLocal {
		return nil, fmt.Errorf("a Kafka cluster runs as local processes only: provider %q", p)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New("java not found on PATH: install a JDK 17+ (Debian: apt-get install -y openjdk-17-jdk-headless)")
	}
	libs, err := kafkaJars(ctx)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * ClusterSize)
	if err != nil {
		return nil, err
	}
	var voters []string
	for i := range ClusterSize {
		voters = append(voters, fmt.Sprintf("%d@%s", i+1, hostPort(ports[2*i+1])))
	}
	clusterID := kafkaClusterID()
	keep := keepServers()
	c := &KafkaCluster{}
	for i := range ClusterSize {
		work, err := os.MkdirTemp("", fmt.Sprintf("canon-kafka-node%d-", i+1))
		if err != nil {
			c.Stop()
			return nil, err
		}
		port, controllerPort := ports[2*i], ports[2*i+1]
		extra := map[string]string{
			"node.id":                  strconv.Itoa(i + 1),
			"controller.quorum.voters": strings.Join(voters, ","),
		}
		for k, v := range clusterProps {
			extra[k] = v
		}
		for k, v := range opts.Configs {
			extra[k] = v
		}
		dataDir := filepath.Join(work, "data")
		propsPath := filepath.Join(work, "server.properties")
		logCfg := filepath.Join(work, "log4j2.properties")
		if err := os.WriteFile(propsPath, []byte(kafkaConfig(dataDir, port, controllerPort, extra)), 0o644); err != nil {
			c.Stop()
			return nil, err
		}
		if err := os.WriteFile(logCfg, []byte(kafkaLog4j2), 0o644); err != nil {
			c.Stop()
			return nil, err
		}
		jvm := []string{java, "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + logCfg, "-cp", filepath.Join(libs, "*")}
		format := exec.CommandContext(ctx, jvm[0], append(jvm[1:], "kafka.tools.StorageTool", "format",
			"-t", clusterID, "-c", propsPath, "--ignore-formatted")...)
		if out, err := format.CombinedOutput(); err != nil {
			os.RemoveAll(work)
			c.Stop()
			return nil, fmt.Errorf("format kafka storage of node %d: %w\n%s", i+1, err, out)
		}
		proc := newProcess(fmt.Sprintf("kafka-node%d", i+1), work, filepath.Join(work, "kafka.log"), nil, append(jvm, "kafka.Kafka", propsPath)...)
		c.Nodes = append(c.Nodes, localKafka(proc, work, hostPort(port), keep))
	}
	// The nodes wait for a quorum of controllers: start them all, then
	// wait for each.
	begin := time.Now()
	errs := make([]error, ClusterSize)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.restart(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, fmt.Errorf("start the Kafka cluster: %w", err)
	}
	for _, n := range c.Nodes {
		n.srv.started = time.Since(begin)
	}
	return c, nil
}
