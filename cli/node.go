package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/ops"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/bundle"
)

// kafkaFlags configure the connection to Kafka and Canon's topics.
type kafkaFlags struct {
	brokers           []string
	topicPrefix       string
	partitions        int32
	replicationFactor int16
	minInsyncReplicas int
	maxMessageBytes   int32
	security          kafka.SecurityConfig
}

func (k *kafkaFlags) register(cmd *cobra.Command, brokersHelp string) {
	f := cmd.Flags()
	f.StringSliceVar(&k.brokers, "brokers", nil, brokersHelp)
	f.StringVar(&k.topicPrefix, "topic-prefix", "", "prefix of Canon's topic names, to share a Kafka cluster between deployments")
	f.Int32Var(&k.partitions, "topic-partitions", kafka.DefaultPartitions,
		"partitions of Canon's topics when they are created (existing topics keep theirs)")
	f.Int16Var(&k.replicationFactor, "replication-factor", -1, "replication factor of new topics (-1: 3, or the number of brokers when fewer)")
	f.IntVar(&k.minInsyncReplicas, "min-insync-replicas", 0,
		"min.insync.replicas of new replicated topics: replicas that hold a record before it is acknowledged (0: 2; at least 2)")
	f.Int32Var(&k.maxMessageBytes, "max-message-bytes", kafka.DefaultMaxMessageBytes, "max.message.bytes of Canon's topics")
	registerKafkaSecurity(cmd, &k.security)
}

// registerKafkaSecurity adds the flags that reach a secured Kafka.
func registerKafkaSecurity(cmd *cobra.Command, s *kafka.SecurityConfig) {
	f := cmd.Flags()
	f.BoolVar(&s.TLS, "kafka-tls", false, "connect to Kafka with TLS (implied by the other --kafka-tls-… flags)")
	f.StringVar(&s.CAFile, "kafka-tls-ca", "", "PEM file of the CAs that sign the brokers' certificates (default: the system's)")
	f.StringVar(&s.CertFile, "kafka-tls-cert", "", "PEM client certificate, for brokers that authenticate clients by certificate (mTLS)")
	f.StringVar(&s.KeyFile, "kafka-tls-key", "", "PEM key of --kafka-tls-cert")
	f.StringVar(&s.ServerName, "kafka-tls-server-name", "", "host name to check in the brokers' certificates (default: the one in --brokers)")
	f.StringVar(&s.SASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
	f.StringVar(&s.SASLUser, "kafka-sasl-user", "", "SASL user (PLAIN, SCRAM)")
	f.StringVar(&s.SASLPassword, "kafka-sasl-password", "", "SASL password (better: --kafka-sasl-password-file or CANON_KAFKA_SASL_PASSWORD)")
	f.StringVar(&s.SASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password")
	f.StringVar(&s.OAuthTokenFile, "kafka-sasl-oauth-token-file", "", "file holding the OAUTHBEARER token, read at every authentication (rotate it in place)")
	f.StringArrayVar(&s.Options, "kafka-option", nil, "further Kafka client option NAME=VALUE, repeatable: "+strings.Join(kafka.ClientOptionNames(), ", "))
}

// clientConfig is the Kafka client config of the flags, security
// included; its errors are usage errors.
func (k *kafkaFlags) clientConfig(clientID string, log *slog.Logger) (kafka.ClientConfig, error) {
	return securedClientConfig(k.brokers, &k.security, clientID, log)
}

func securedClientConfig(brokers []string, s *kafka.SecurityConfig, clientID string, log *slog.Logger) (kafka.ClientConfig, error) {
	c := kafka.ClientConfig{Brokers: brokers, ClientID: clientID, Log: log}
	if err := s.Apply(&c); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

func (k *kafkaFlags) topicsConfig() kafka.TopicsConfig {
	return kafka.TopicsConfig{
		Names:             kafka.DefaultTopicNames().WithPrefix(k.topicPrefix),
		Partitions:        k.partitions,
		ReplicationFactor: k.replicationFactor,
		MinInsyncReplicas: k.minInsyncReplicas,
		MaxMessageBytes:   k.maxMessageBytes,
	}
}

// node is what every Canon process runs, whatever its roles: a metrics
// registry, a Kafka admin connection, Canon's topics checked or created,
// and the HTTP server with /healthz, /readyz and /metrics.
type node struct {
	log      *slog.Logger
	registry *prometheus.Registry
	ready    *ops.Readiness
	mux      *http.ServeMux
	kcfg     kafka.ClientConfig
	topics   kafka.TopicsInfo
	httpLn   net.Listener
	// dataDir holds the roles' local state (the store under store/).
	dataDir string
	// keys verify access tokens; nil when none were given.
	keys *auth.Keyset
	// keysPath is the file keys came from, read again every keysReload
	// and on SIGHUP into verify, the keyset every role verifies with.
	keysPath   string
	keysReload time.Duration
	verify     *auth.Keyset
	// topicPrefix is --topic-prefix: it also prefixes the consumer groups,
	// so that deployments sharing a cluster never share a group.
	topicPrefix string
	// seq tunes the sequencer role; zero fields take its defaults.
	seq sequencerTuning
	// producerLinger and producerDirect are the producer role's
	// Config.Linger and ProduceDirect (hidden --producer-linger,
	// --producer-rounds=false).
	producerLinger time.Duration
	producerDirect bool
	// producerGather is the producer role's Config.RoundGather (hidden
	// --producer-gather).
	producerGather time.Duration
	// mutators are what the sequencer role decides with: the built-ins
	// and the application's (Options.Mutators).
	mutators *model.Registry
	// bundleOpts are the JavaScript mutators' budgets; bundles compiles
	// deployed bundles with them, once per hash.
	bundleOpts bundle.Options
	bundles    *model.BundleCache
	// partitions are the partitions of Canon's topics that the node's read
	// roles serve (--partitions); nil means all of them.
	partitions []int32
	// pprof serves Go's profiles under /debug/pprof/ (--pprof).
	pprof bool
	// storeNoSync commits the store's batches without an fsync
	// (--store-sync never; store.Config.NoSync).
	storeNoSync bool
	// checkpoints are the --checkpoint-* flags; no checkpoints when its
	// url is empty.
	checkpoints *checkpointFlags
	// cors says which browser origins may use the HTTP APIs and the
	// websocket (--cors-origins); nil allows none but the server's own.
	cors *httpapi.CORS
}

// DefaultKeysReload is how often a node reads its keyset file again: a
// key removed from it (canon token rmkey) stops verifying within this
// time, or at once on SIGHUP.
const DefaultKeysReload = 2 * time.Second

// verifyKeys is the verify-only keyset the roles share, replaced when the
// keyset file changes (watchKeys).
func (n *node) verifyKeys() *auth.Keyset {
	if n.verify == nil {
		n.verify = n.keys.VerifyOnly()
	}
	return n.verify
}

// watchKeys reads the keyset file every keysReload and on SIGHUP, and
// makes the roles verify with it when it changed: a running server
// revokes the tokens of a removed key without a restart. A file that does
// not load is reported and the keys in use are kept.
func (n *node) watchKeys(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	interval := n.keysReload
	if interval <= 0 {
		interval = DefaultKeysReload
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last, _ := os.ReadFile(n.keysPath)
	for {
		forced := false
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			forced = true
		case <-t.C:
		}
		raw, err := os.ReadFile(n.keysPath)
		if err == nil && !forced && bytes.Equal(raw, last) {
			continue
		}
		k, err := auth.LoadKeyset(n.keysPath)
		if err != nil {
			n.log.Error("reload the keyset; the keys in use stay", "file", n.keysPath, "err", err)
			continue
		}
		last = raw
		n.verify.Replace(k.VerifyOnly())
		n.log.Info("keyset reloaded", "file", n.keysPath, "keys", k.IDs(), "sighup", forced)
	}
}

// sequencerTuning holds the hidden timeouts of `canon serve` that tests
// shorten, so a failure test does not wait for production timeouts.
type sequencerTuning struct {
	sessionTimeout time.Duration
	txnTimeout     time.Duration
	// instanceID is --instance-id; empty keeps the one of the data dir.
	instanceID string
	// gatherWait and gatherFresh are the hidden --gather-wait and
	// --gather-fresh (sequencer.Config.GatherWait, GatherFresh).
	gatherWait  time.Duration
	gatherFresh bool
	// pushWait and linger are the hidden --push-wait and
	// --sequencer-linger (sequencer.Config.PushWait, Linger).
	pushWait time.Duration
	linger   time.Duration
	// standbys is --standbys: partitions kept warm beside the owned ones.
	standbys int
	// liveness and livenessAdvertise are --liveness-addr and
	// --liveness-advertise, keepOnStop --keep-partitions-on-stop
	// (sequencer.Config.Liveness, LivenessAdvertise, KeepPartitionsOnStop).
	liveness          string
	livenessAdvertise string
	keepOnStop        bool
}

// newNode connects to Kafka, ensures the topics and binds the HTTP
// address; nothing is served until run.
func newNode(ctx context.Context, log *slog.Logger, brokers []string, kf *kafkaFlags, httpAddr, dataDir string) (*node, error) {
	reg := prometheus.NewRegistry()
	requests := kafka.NewRequestCounts()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), requests)
	n := &node{
		log:         log,
		registry:    reg,
		ready:       ops.NewReadiness(),
		mux:         http.NewServeMux(),
		dataDir:     dataDir,
		topicPrefix: kf.topicPrefix,
		kcfg:        kafka.ClientConfig{Brokers: brokers, ClientID: "canon-admin", Log: log, Registerer: reg, Requests: requests},
	}
	if err := kf.security.Apply(&n.kcfg); err != nil {
		return nil, usageError{err}
	}
	tcfg := kf.topicsConfig()
	if err := tcfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	opts, err := n.kcfg.Opts()
	if err != nil {
		return nil, usageError{err}
	}
	cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(10*time.Second))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n.topics, err = kafka.EnsureTopics(ectx, cl, tcfg, log)
	if err != nil {
		return nil, fmt.Errorf("check Canon's topics on %v: %w", brokers, kafka.ExplainConnError(err))
	}
	n.httpLn, err = net.Listen("tcp", httpAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for HTTP on %s (%w): pass --http with a free address", httpAddr, err)
	}
	return n, nil
}

// run serves HTTP and runs the components until ctx ends or one of them
// fails; it returns after all of them stopped.
func (n *node) run(ctx context.Context, components []component) error {
	// Readiness: the broker answers. Components add their own checks.
	opts, _ := n.kcfg.Opts()
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("canon-health"), kgo.RetryTimeout(ops.CheckTimeout))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var lastKafkaOK atomic.Int64
	n.ready.Add("kafka", func(ctx context.Context) error {
		if _, err := adm.BrokerMetadata(ctx); err != nil {
			return fmt.Errorf("brokers %v do not answer: %w", n.kcfg.Brokers, err)
		}
		lastKafkaOK.Store(time.Now().Unix())
		return nil
	})
	ops.Mount(n.mux, n.ready, n.registry, n.log)
	if n.pprof {
		n.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		n.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		n.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		n.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		n.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}

	g, gctx := errgroup.WithContext(ctx)
	h := httpapi.Routes(n.mux)
	if n.cors != nil {
		h = n.cors.Handler(h)
	}
	g.Go(func() error { return ops.Serve(gctx, n.httpLn, h, n.log, 10*time.Second, ops.Timeouts{}) })
	for _, c := range components {
		g.Go(func() error { return c.run(gctx) })
	}
	if n.keysPath != "" && n.verify != nil {
		g.Go(func() error { return n.watchKeys(gctx) })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	return err
}

// Values of --store-sync.
const (
	storeSyncAlways = "always"
	storeSyncNever  = "never"
)

func registerStoreSyncFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "store-sync", storeSyncNever, "when the store's writes wait for the disk: never (the OS writes them back; after a machine crash "+
		"the store restores what it lost from canon.versions, see docs/store.md) or always (an fsync per sequencer transaction)")
}

// parseStoreSync reads --store-sync; true means no fsync. The default is
// never: the store is a copy of canon.versions, and each of its batches
// carries the changelog offset it ends at, so a crash can only lose a
// suffix that the restore reads again (docs/store.md).
func parseStoreSync(v string) (bool, error) {
	switch v {
	case storeSyncAlways:
		return false, nil
	case storeSyncNever, "":
		return true, nil
	}
	return false, usageError{fmt.Errorf("--store-sync %q: pass %s or %s", v, storeSyncNever, storeSyncAlways)}
}
