package kafka

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/testenv"
)

// TestSecuredBroker reaches a real broker's SASL_SSL listener with every
// SASL mechanism and its mTLS listener with a client certificate, creates
// Canon's topics and writes a record through each, and checks that a
// wrong password, an untrusted broker certificate and a client
// certificate of another CA fail with an error that says what to fix.
func TestSecuredBroker(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("integration test skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := testenv.StartKafka(ctx, testenv.KafkaOptions{Provider: testenv.ProviderLocal, Security: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the secured broker's log:\n%s", srv.Tail(60))
		}
	})
	sec := srv.Security
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	password := file("password", sec.Password+"\n")
	wrong := file("wrong", "not-"+sec.Password)
	token := file("token", sec.OAuthToken("canon"))
	clientCert, clientKey, err := sec.CA.Issue("client")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testenv.NewCA(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, strangerKey, err := other.Issue("stranger")
	if err != nil {
		t.Fatal(err)
	}
	scram := func(mech, pw string) SecurityConfig {
		return SecurityConfig{CAFile: sec.CA.CertFile, SASLMechanism: mech, SASLUser: sec.User, SASLPasswordFile: pw}
	}
	for _, tc := range []struct {
		name    string
		brokers []string
		sc      SecurityConfig
		wantErr string
	}{
		{"SCRAM-SHA-256", sec.SASLSSLBrokers, scram(MechanismScram256, password), ""},
		{"SCRAM-SHA-512", sec.SASLSSLBrokers, scram(MechanismScram512, password), ""},
		{"PLAIN", sec.SASLSSLBrokers, scram(MechanismPlain, password), ""},
		{"OAUTHBEARER", sec.SASLSSLBrokers, SecurityConfig{CAFile: sec.CA.CertFile, SASLMechanism: MechanismOAuthBearer, OAuthTokenFile: token}, ""},
		{"mTLS", sec.SSLBrokers, SecurityConfig{CAFile: sec.CA.CertFile, CertFile: clientCert, KeyFile: clientKey}, ""},
		{"wrong password", sec.SASLSSLBrokers, scram(MechanismScram256, wrong), "refused the SASL credentials"},
		{"wrong PLAIN password", sec.SASLSSLBrokers, scram(MechanismPlain, wrong), "refused the SASL credentials"},
		{"untrusted broker certificate", sec.SASLSSLBrokers,
			SecurityConfig{CAFile: other.CertFile, SASLMechanism: MechanismScram256, SASLUser: sec.User, SASLPasswordFile: password},
			"pass its CA with --kafka-tls-ca"},
		{"client certificate of another CA", sec.SSLBrokers,
			SecurityConfig{CAFile: sec.CA.CertFile, CertFile: strangerCert, KeyFile: strangerKey}, "refused the TLS handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ClientConfig{Brokers: tc.brokers, ClientID: "canon-test"}
			if err := tc.sc.Apply(&cfg); err != nil {
				t.Fatal(err)
			}
			opts, err := cfg.Opts()
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(5*time.Second), kgo.DefaultProduceTopic("x"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			names := DefaultTopicNames().WithPrefix(strings.ReplaceAll(tc.name, " ", "_") + "." + t.Name()[len(t.Name())-3:] + ".")
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			defer ccancel()
			_, err = EnsureTopics(cctx, cl, TopicsConfig{Names: names, Partitions: 1, ReplicationFactor: 1}, nil)
			if err == nil {
				err = cl.ProduceSync(cctx, &kgo.Record{Topic: names.Mutations, Value: []byte("hello")}).FirstErr()
			}
			err = ExplainConnError(err)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%s: %v", tc.name, err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("%s: no error, want one that says %q", tc.name, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("%s: error %q does not say %q", tc.name, err, tc.wantErr)
			case err != nil:
				t.Logf("%s: %v", tc.name, err)
			}
		})
	}
}
