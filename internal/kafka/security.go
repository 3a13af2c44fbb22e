package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms of SecurityConfig.SASLMechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismScram256    = "SCRAM-SHA-256"
	MechanismScram512    = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

// SecurityConfig says how Canon's clients reach a secured cluster: TLS
// (with a client certificate for mTLS), SASL, and other client options by
// name. Secrets are best given as files: the flags of `canon` map to its
// fields (--kafka-tls, --kafka-sasl-mechanism …; see docs/deployment.md).
type SecurityConfig struct {
	// TLS encrypts the connections. It is implied by CAFile, CertFile
	// and KeyFile.
	TLS bool
	// CAFile is a PEM file of the CAs that sign the brokers' certificates;
	// empty trusts the system's.
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and key, for
	// brokers that authenticate clients by certificate (mTLS).
	CertFile, KeyFile string
	// ServerName overrides the host name checked in the brokers'
	// certificates.
	ServerName string

	// SASLMechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
	// OAUTHBEARER; empty for no SASL.
	SASLMechanism string
	// SASLUser and SASLPassword (or SASLPasswordFile, read at start) for
	// PLAIN and SCRAM.
	SASLUser, SASLPassword, SASLPasswordFile string
	// OAuthTokenFile holds the bearer token of OAUTHBEARER. It is read at
	// every authentication, so a sidecar that renews the file rotates the
	// token without a restart.
	OAuthTokenFile string

	// Options are further client options, NAME=VALUE, for what Canon has
	// no flag of its own: see ClientOptionNames.
	Options []string
}

// clientOptions are the client options SecurityConfig.Options accepts, by
// their Java client names where there is one.
var clientOptions = map[string]func(string) (kgo.Opt, error){
	"client.rack": func(v string) (kgo.Opt, error) { return kgo.Rack(v), nil },
	"compression.type": func(v string) (kgo.Opt, error) {
		c, err := CompressionCodec(v)
		if err != nil {
			return nil, err
		}
		return kgo.ProducerBatchCompression(c), nil
	},
	"connections.max.idle.ms":            durationOpt(func(d time.Duration) kgo.Opt { return kgo.ConnIdleTimeout(d) }),
	"metadata.max.age.ms":                durationOpt(func(d time.Duration) kgo.Opt { return kgo.MetadataMaxAge(d) }),
	"socket.connection.setup.timeout.ms": durationOpt(func(d time.Duration) kgo.Opt { return kgo.DialTimeout(d) }),
	"request.timeout.overhead.ms":        durationOpt(func(d time.Duration) kgo.Opt { return kgo.RequestTimeoutOverhead(d) }),
	"retry.timeout.ms":                   durationOpt(func(d time.Duration) kgo.Opt { return kgo.RetryTimeout(d) }),
}

// DefaultCompression is the producer codec of Canon's clients: snappy,
// franz-go's default. lz4, zstd and none were measured against it in
// `make bench`'s mix and the edits workload and kept no advantage in both
// (docs/performance.md).
var DefaultCompression = kgo.SnappyCompression()

// CompressionCodec returns the producer batch codec named as Kafka's
// compression.type names it: none, gzip, snappy, lz4 or zstd. Canon's
// clients use DefaultCompression unless told otherwise.
func CompressionCodec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("%q is no compression type: use none, gzip, snappy, lz4 or zstd", name)
}

func durationOpt(f func(time.Duration) kgo.Opt) func(string) (kgo.Opt, error) {
	return func(v string) (kgo.Opt, error) {
		var ms int64
		if _, err := fmt.Sscanf(v, "%d", &ms); err != nil || ms < 0 || fmt.Sprint(ms) != v {
			return nil, fmt.Errorf("%q is not a count of milliseconds", v)
		}
		return f(time.Duration(ms) * time.Millisecond), nil
	}
}

// ClientOptionNames lists the names SecurityConfig.Options accepts.
func ClientOptionNames() []string {
	names := make([]string, 0, len(clientOptions))
	for n := range clientOptions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Apply sets c's TLS, SASL and extra options from s, reading the files
// it names. Its errors say which setting to fix.
func (s SecurityConfig) Apply(c *ClientConfig) error {
	if s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" {
		cfg, err := s.tlsConfig()
		if err != nil {
			return err
		}
		c.TLS = cfg
	}
	mech, err := s.mechanism()
	if err != nil {
		return err
	}
	c.SASL = mech
	for _, o := range s.Options {
		name, value, ok := strings.Cut(o, "=")
		f := clientOptions[strings.TrimSpace(name)]
		if !ok || f == nil {
			return fmt.Errorf("client option %q (--kafka-option): use NAME=VALUE with NAME one of %s", o, strings.Join(ClientOptionNames(), ", "))
		}
		opt, err := f(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("client option %s (--kafka-option): %w", name, err)
		}
		c.Extra = append(c.Extra, opt)
	}
	return nil
}

func (s SecurityConfig) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the Kafka CA file (--kafka-tls-ca): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the Kafka CA file %s (--kafka-tls-ca) holds no PEM certificate", s.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return nil, errors.New("a Kafka client certificate needs both --kafka-tls-cert and --kafka-tls-key")
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the Kafka client certificate (--kafka-tls-cert, --kafka-tls-key): %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func (s SecurityConfig) mechanism() (sasl.Mechanism, error) {
	m := strings.ToUpper(strings.TrimSpace(s.SASLMechanism))
	if m == "" {
		if s.SASLUser != "" || s.SASLPassword != "" || s.SASLPasswordFile != "" || s.OAuthTokenFile != "" {
			return nil, fmt.Errorf("SASL credentials without a mechanism: pass --kafka-sasl-mechanism %s, %s, %s or %s",
				MechanismPlain, MechanismScram256, MechanismScram512, MechanismOAuthBearer)
		}
		return nil, nil
	}
	if m == MechanismOAuthBearer {
		if s.OAuthTokenFile == "" {
			return nil, errors.New("SASL OAUTHBEARER needs a token: pass --kafka-sasl-oauth-token-file")
		}
		file := s.OAuthTokenFile
		if _, err := readSecret(file); err != nil {
			return nil, fmt.Errorf("read the OAUTHBEARER token (--kafka-sasl-oauth-token-file): %w", err)
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			token, err := readSecret(file)
			if err != nil {
				return oauth.Auth{}, fmt.Errorf("read the OAUTHBEARER token (--kafka-sasl-oauth-token-file): %w", err)
			}
			return oauth.Auth{Token: token}, nil
		}), nil
	}
	password := s.SASLPassword
	if s.SASLPasswordFile != "" {
		if password != "" {
			return nil, errors.New("both --kafka-sasl-password and --kafka-sasl-password-file are set: keep one")
		}
		p, err := readSecret(s.SASLPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("read the SASL password (--kafka-sasl-password-file): %w", err)
		}
		password = p
	}
	if s.SASLUser == "" || password == "" {
		return nil, fmt.Errorf("SASL %s needs --kafka-sasl-user and a password (--kafka-sasl-password-file, or CANON_KAFKA_SASL_PASSWORD)", m)
	}
	switch m {
	case MechanismPlain:
		return plain.Auth{User: s.SASLUser, Pass: password}.AsMechanism(), nil
	case MechanismScram256:
		return scram.Auth{User: s.SASLUser, Pass: password}.AsSha256Mechanism(), nil
	case MechanismScram512:
		return scram.Auth{User: s.SASLUser, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("SASL mechanism %q: use %s, %s, %s or %s", s.SASLMechanism,
		MechanismPlain, MechanismScram256, MechanismScram512, MechanismOAuthBearer)
}

// readSecret reads a file holding one secret; a final newline is not part
// of it.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// ExplainConnError adds to an error of a client that could not talk to
// the brokers what to check, when it is a security error.
func ExplainConnError(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var alert tls.AlertError
	var recordHeader tls.RecordHeaderError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%w (the broker refused the SASL credentials: check --kafka-sasl-mechanism, --kafka-sasl-user and the password or token)", err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w (the broker's certificate is not signed by a CA Canon trusts: pass its CA with --kafka-tls-ca)", err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w (the broker's certificate does not name the address in --brokers: use that name, or --kafka-tls-server-name)", err)
	case errors.As(err, &certInvalid):
		return fmt.Errorf("%w (the broker's certificate is not valid: check its dates and usage)", err)
	case errors.As(err, &alert), strings.Contains(err.Error(), "remote error: tls"):
		return fmt.Errorf("%w (the broker refused the TLS handshake: it may require a client certificate, --kafka-tls-cert and --kafka-tls-key, signed by a CA it trusts)", err)
	case errors.As(err, &recordHeader):
		return fmt.Errorf("%w (the broker does not speak TLS on this port: drop --kafka-tls, or use its TLS listener)", err)
	case errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("%w (the listener does not accept this SASL mechanism: check --kafka-sasl-mechanism against the broker's sasl.enabled.mechanisms)", err)
	}
	return err
}
