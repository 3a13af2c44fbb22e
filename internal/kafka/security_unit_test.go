package kafka

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecurityConfigErrors: every bad setting is refused with an error
// that names the flag to fix.
func TestSecurityConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	notPEM := filepath.Join(dir, "not-pem")
	pw := filepath.Join(dir, "pw")
	for path, content := range map[string]string{empty: "", notPEM: "hello", pw: "secret\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		sc   SecurityConfig
		want string
	}{
		{"unknown mechanism", SecurityConfig{SASLMechanism: "GSSAPI", SASLUser: "u", SASLPassword: "p"}, "use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"},
		{"credentials without a mechanism", SecurityConfig{SASLUser: "u"}, "--kafka-sasl-mechanism"},
		{"no password", SecurityConfig{SASLMechanism: "SCRAM-SHA-256", SASLUser: "u"}, "--kafka-sasl-password-file"},
		{"two passwords", SecurityConfig{SASLMechanism: "PLAIN", SASLUser: "u", SASLPassword: "p", SASLPasswordFile: pw}, "keep one"},
		{"empty password file", SecurityConfig{SASLMechanism: "PLAIN", SASLUser: "u", SASLPasswordFile: empty}, "is empty"},
		{"no token", SecurityConfig{SASLMechanism: "OAUTHBEARER"}, "--kafka-sasl-oauth-token-file"},
		{"missing CA file", SecurityConfig{CAFile: filepath.Join(dir, "nope")}, "--kafka-tls-ca"},
		{"CA file without PEM", SecurityConfig{CAFile: notPEM}, "holds no PEM certificate"},
		{"certificate without key", SecurityConfig{CertFile: notPEM}, "both --kafka-tls-cert and --kafka-tls-key"},
		{"bad key pair", SecurityConfig{CertFile: notPEM, KeyFile: notPEM}, "--kafka-tls-cert, --kafka-tls-key"},
		{"unknown option", SecurityConfig{Options: []string{"linger.ms=5"}}, "NAME one of client.rack"},
		{"option without a value", SecurityConfig{Options: []string{"client.rack"}}, "use NAME=VALUE"},
		{"bad duration", SecurityConfig{Options: []string{"retry.timeout.ms=5s"}}, "not a count of milliseconds"},
		{"unknown codec", SecurityConfig{Options: []string{"compression.type=brotli"}}, `"brotli" is no compression type: use none, gzip, snappy, lz4 or zstd`},
	} {
		var c ClientConfig
		err := tc.sc.Apply(&c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error that says %q", tc.name, err, tc.want)
		}
	}

	var c ClientConfig
	ok := SecurityConfig{SASLMechanism: "scram-sha-512", SASLUser: "u", SASLPasswordFile: pw, Options: []string{"client.rack=az1", "retry.timeout.ms=2000", "compression.type=zstd"}}
	if err := ok.Apply(&c); err != nil {
		t.Fatal(err)
	}
	if c.SASL == nil || c.SASL.Name() != MechanismScram512 || len(c.Extra) != 3 || c.TLS != nil {
		t.Fatalf("applied: SASL %v, %d extra options, TLS %v", c.SASL, len(c.Extra), c.TLS)
	}
}
