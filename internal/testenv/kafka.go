package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Pinned versions of the Kafka broker the tests run against.
const (
	// KafkaVersion is the Apache Kafka release fetched from Maven Central
	// (org.apache.kafka:kafka_2.13) for local brokers.
	KafkaVersion = "4.2.0"
	// kafkaLog4jVersion matches the log4j-core that KafkaVersion depends
	// on; log4j-slf4j-impl binds Kafka's slf4j logging to it.
	kafkaLog4jVersion = "2.25.3"
	// KafkaImage is the image used when a Docker engine is available.
	KafkaImage = "apache/kafka:" + KafkaVersion
)

// KafkaOptions configures a broker started with StartKafka.
type KafkaOptions struct {
	// Provider forces docker or local; empty chooses as the package doc says.
	Provider string
	// Configs are extra server.properties entries, e.g.
	// "group.min.session.timeout.ms".
	Configs map[string]string
	// Security adds a SASL_SSL and an mTLS listener, with a CA made for
	// the broker (KafkaServer.Security); local provider only.
	Security bool
}

// KafkaServer is a broker started by this package. Failure tests use a
// dedicated one so they can kill and restart it.
type KafkaServer struct {
	srv      *server
	proc     *process // local provider only
	restart  func(ctx context.Context) error
	kill     func()
	workDir  string
	provider string
	// Security describes the secured listeners, if KafkaOptions.Security
	// asked for them.
	Security *KafkaSecurity
}

// Brokers returns the seed addresses of the broker.
func (k *KafkaServer) Brokers() []string { return k.srv.addrs }

// Provider tells whether the broker is a docker container or a local
// process.
func (k *KafkaServer) Provider() string { return k.provider }

// StartTime is how long the broker took to start and answer.
func (k *KafkaServer) StartTime() time.Duration { return k.srv.started }

// Stop stops the broker and removes its data.
func (k *KafkaServer) Stop() { k.srv.stop() }

// Kill ends the broker with SIGKILL, as a crash would. Its data is kept
// so that Restart brings it back with the same log.
func (k *KafkaServer) Kill() { k.kill() }

// Restart starts a killed broker again on the same ports and data, and
// waits until it answers.
func (k *KafkaServer) Restart(ctx context.Context) error { return k.restart(ctx) }

// Tail returns the last n lines of the broker log.
func (k *KafkaServer) Tail(n int) string { return k.srv.tail(n) }

// StartKafka starts a new single-node KRaft broker. The caller stops it.
func StartKafka(ctx context.Context, opts KafkaOptions) (*KafkaServer, error) {
	provider := opts.Provider
	if provider == "" {
		provider = chooseProvider(ctx)
	}
	begin := time.Now()
	var (
		k   *KafkaServer
		err error
	)
	switch provider {
	case ProviderDocker:
		if opts.Security {
			return nil, fmt.Errorf("a broker with secured listeners runs as a local process only: set %s=%s", EnvProvider, ProviderLocal)
		}
		k, err = startDockerKafka(ctx, opts)
	case ProviderLocal:
		k, err = startLocalKafka(ctx, opts)
	default:
		return nil, fmt.Errorf("unknown provider %q: use %s or %s", provider, ProviderDocker, ProviderLocal)
	}
	if err != nil {
		return nil, fmt.Errorf("start kafka (%s): %w", provider, err)
	}
	k.srv.started = time.Since(begin)
	return k, nil
}

// kafkaConfig is the server.properties of a single-node combined
// broker+controller. Settings are chosen for tests: one replica for internal
// topics, no initial rebalance delay, no topic auto-creation (Canon creates
// its topics itself and a typo must not create one silently).
func kafkaConfig(dataDir string, port, controllerPort int, extra map[string]string) string {
	props := kafkaProps(dataDir, port, controllerPort, extra)
	var b strings.Builder
	for _, k := range sortedKeys(props) {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	return b.String()
}

func kafkaProps(dataDir string, port, controllerPort int, extra map[string]string) map[string]string {
	props := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
		"controller.quorum.voters":                         "1@" + hostPort(controllerPort),
		"listeners":                                        fmt.Sprintf("PLAINTEXT://%s,CONTROLLER://%s", hostPort(port), hostPort(controllerPort)),
		"advertised.listeners":                             "PLAINTEXT://" + hostPort(port),
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                         dataDir,
		"num.partitions":                                   "1",
		"auto.create.topics.enable":                        "false",
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     "4",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "4",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		"group.min.session.timeout.ms":                     "1000",
		"log.flush.interval.messages":                      "9223372036854775807",
		"num.network.threads":                              "2",
		"num.io.threads":                                   "4",
		"message.max.bytes":                                "4194304",
		"delete.topic.enable":                              "true",
	}
	for k, v := range extra {
		props[k] = v
	}
	return props
}

// kafkaLog4j2 sends the broker's logs to stdout, which the process log
// captures, at INFO for the broker and WARN for the chatty parts.
const kafkaLog4j2 = `status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
`

func startLocalKafka(ctx context.Context, opts KafkaOptions) (*KafkaServer, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New("java not found on PATH: install a JDK 17+ (Debian: apt-get install -y openjdk-17-jdk-headless)")
	}
	libs, err := kafkaJars(ctx)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "canon-kafka-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(work, "data")
	propsPath := filepath.Join(work, "server.properties")
	logCfg := filepath.Join(work, "log4j2.properties")
	configs := opts.Configs
	var sec *KafkaSecurity
	if opts.Security {
		var keystore string
		if sec, keystore, err = newKafkaSecurity(work, ports[2], ports[3]); err != nil {
			return nil, fmt.Errorf("make the broker's certificates: %w", err)
		}
		configs = securityProps(sec, keystore, ports[0], ports[1], ports[2], ports[3])
		for k, v := range opts.Configs {
			configs[k] = v
		}
	}
	if err := os.WriteFile(propsPath, []byte(kafkaConfig(dataDir, ports[0], ports[1], configs)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(logCfg, []byte(kafkaLog4j2), 0o644); err != nil {
		return nil, err
	}
	classpath := filepath.Join(libs, "*")
	logPath := filepath.Join(work, "kafka.log")
	jvm := []string{java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + logCfg, "-cp", classpath}

	formatArgs := append(jvm[1:], "kafka.tools.StorageTool", "format",
		"-t", kafkaClusterID(), "-c", propsPath, "--ignore-formatted")
	if sec != nil {
		formatArgs = append(formatArgs, sec.scramArgs()...)
	}
	format := exec.CommandContext(ctx, jvm[0], formatArgs...)
	if out, err := format.CombinedOutput(); err != nil {
		os.RemoveAll(work)
		return nil, fmt.Errorf("format kafka storage: %w\n%s", err, out)
	}

	proc := newProcess("kafka", work, logPath, nil, append(jvm, "kafka.Kafka", propsPath)...)
	k := localKafka(proc, work, hostPort(ports[0]), keepServers())
	k.Security = sec
	if err := k.restart(ctx); err != nil {
		k.srv.stop()
		return nil, err
	}
	return k, nil
}

// localKafka is a broker run by proc from work, answering at addr, not
// started yet: restart starts it and waits until it answers; stop ends it
// and removes work unless keep.
func localKafka(proc *process, work, addr string, keep bool) *KafkaServer {
	k := &KafkaServer{proc: proc, workDir: work, provider: ProviderLocal}
	k.srv = &server{
		name:     proc.name,
		provider: ProviderLocal,
		addrs:    []string{addr},
		tail:     proc.tail,
		stop: func() {
			proc.stop(20 * time.Second)
			if !keep {
				os.RemoveAll(work)
			}
		},
	}
	k.kill = proc.kill
	k.restart = func(ctx context.Context) error {
		if err := proc.start(); err != nil {
			return err
		}
		return proc.waitFor(ctx, "answering", func(ctx context.Context) error { return pingKafka(ctx, k.srv.addrs) })
	}
	return k
}

// pingKafka succeeds once the broker answers metadata requests and a
// controller is elected.
func pingKafka(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RetryTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 || md.Controller < 0 {
		return errors.New("no broker or controller in metadata yet")
	}
	return nil
}

// kafkaPOM lists the broker and a log4j binding; Maven resolves the rest.
const kafkaPOM = `<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.canon.testenv</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>%[1]s</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>%[1]s</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>%[2]s</version>
    </dependency>
  </dependencies>
</project>
`

// kafkaJars returns the directory holding the broker's jars, fetching
// them with Maven on first use into the user cache dir.
func kafkaJars(ctx context.Context) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "kafka-"+KafkaVersion)
	libs := filepath.Join(dir, "libs")
	marker := filepath.Join(dir, ".complete")
	if _, err := os.Stat(marker); err == nil {
		return libs, nil
	}
	unlock, err := lockFile(filepath.Join(cache, "kafka.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(marker); err == nil {
		return libs, nil // fetched by another process while we waited
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", errors.New("mvn not found on PATH: install Maven (Debian: apt-get install -y maven) so the tests can fetch Kafka's jars")
	}
	os.RemoveAll(libs)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, fmt.Appendf(nil, kafkaPOM, KafkaVersion, kafkaLog4jVersion), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", pom, "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+libs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("fetch Kafka %s jars with Maven: %w\n%s", KafkaVersion, err, lastLines(string(out), 30))
	}
	if err := os.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	return libs, nil
}

// CacheDir is where testenv keeps downloads between runs:
// $CANON_TEST_CACHE, else the user cache dir's canon/testenv.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache dir (set %s): %w", EnvCacheDir, err)
	}
	return filepath.Join(d, "canon", "testenv"), nil
}

// kafkaClusterID returns a random cluster id in Kafka's format: a UUID in
// URL-safe base64 without padding. Like Kafka's own Uuid.randomUuid it
// never starts with '-': kafka-storage's argument parser takes such an id
// for an option and refuses to format (one start in 64 failed that way).
func kafkaClusterID() string {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
