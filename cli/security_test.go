package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canon-sync/canon/internal/testenv"
)

// TestSecurityFlagsReachTheClients: the Kafka and ClickHouse security
// flags of each command are read and checked before anything connects,
// with an error that names the flag (the connections themselves are
// tested on a secured broker in internal/kafka).
func TestSecurityFlagsReachTheClients(t *testing.T) {
	bin := testenv.BuildCanon(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u", "--kafka-sasl-password", "p"}, "SASL mechanism \"GSSAPI\""},
		{[]string{"serve", "--brokers", "127.0.0.1:1", "--kafka-tls-ca", missing}, "--kafka-tls-ca"},
		{[]string{"serve", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", missing}, "--kafka-sasl-password-file"},
		{[]string{"replay", "--brokers", "127.0.0.1:1", "--project", "acme/doc", "--kafka-option", "nope=1"}, "client option \"nope=1\" (--kafka-option)"},
		{[]string{"migrate", "--clickhouse", "127.0.0.1:1", "--clickhouse-password-file", missing}, "--clickhouse-password-file"},
		{[]string{"migrate", "--clickhouse", "127.0.0.1:1", "--clickhouse-tls-ca", missing}, "--clickhouse-tls-ca"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("canon %s: %v\n%s\nwant an error that says %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
