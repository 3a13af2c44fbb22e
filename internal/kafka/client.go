package kafka

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"
)

// ClientConfig holds what every Canon Kafka client shares.
type ClientConfig struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// ClientID names the client in broker logs and metrics; e.g.
	// "canon-sequencer".
	ClientID string
	// Log receives franz-go's logs, at the level its handler enables;
	// nil discards them.
	Log *slog.Logger
	// Registerer gets the client's metrics through kprom, namespaced
	// "canon_kafka" and labeled with ClientID; nil disables them.
	Registerer prometheus.Registerer
	// Requests, when set, counts the client's requests by kind under
	// ClientID (RequestCounts); Aux keeps it, so helper clients are
	// counted too, under their own ids.
	Requests *RequestCounts

	// TLS, when set, encrypts the connections, with the client's
	// certificate when it has one (mTLS). SecurityConfig.Apply sets it.
	TLS *tls.Config
	// SASL, when set, authenticates every connection (franz-go's sasl
	// packages: plain, scram, oauth, aws).
	SASL sasl.Mechanism
	// Extra are further franz-go options, appended after Canon's common
	// ones; a component's own options come after them.
	Extra []kgo.Opt
}

// Aux returns the config for a short-lived helper client of a component
// (a restore reader, a metadata lookup): its own client id and no metrics,
// since kprom registers one set of collectors per client id and two live
// clients with one id would collide.
func (c ClientConfig) Aux(purpose string) ClientConfig {
	c.ClientID += "-" + purpose
	c.Registerer = nil
	return c
}

// NewClient returns a franz-go client with c's options, then extra.
func (c ClientConfig) NewClient(extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := c.Opts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, extra...)...)
}

// Opts returns the kgo options for cfg, to which a component adds its own.
func (c ClientConfig) Opts() ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, fmt.Errorf("no Kafka brokers: pass --brokers host:port[,host:port]")
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			return nil, fmt.Errorf("broker %q is not host:port", b)
		}
	}
	// --kafka-option compression.type (in Extra, after it) overrides the
	// codec.
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ProducerBatchCompression(DefaultCompression, kgo.NoCompression())}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.Log != nil {
		opts = append(opts, kgo.WithLogger(kslog.New(c.Log.With("component", "franz-go"))))
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	opts = append(opts, c.Extra...)
	if c.Requests != nil {
		opts = append(opts, kgo.WithHooks(c.Requests.hook(c.ClientID)))
	}
	if c.Registerer != nil {
		m := kprom.NewMetrics("canon_kafka",
			kprom.Registerer(prometheus.WrapRegistererWith(prometheus.Labels{"client": c.ClientID}, c.Registerer)))
		opts = append(opts, kgo.WithHooks(m))
	}
	return opts, nil
}
