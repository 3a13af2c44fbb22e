// Command certs makes what compose.yaml's SASL_SSL cluster needs, in a
// directory (default deploy/certs), when it is missing: a CA, the
// brokers' certificate for the given host names with its key in one PEM
// keystore, and a random password for the SASL user canon. For a local
// deployment only: the files are readable by every user, since the
// containers run under other ids.
//
//	go run ./internal/testenv/certs -dir deploy/certs -hosts kafka-1,kafka-2,kafka-3
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/canon-sync/canon/internal/testenv"
)

func main() {
	dir := flag.String("dir", "deploy/certs", "directory of the files")
	hosts := flag.String("hosts", "kafka-1,kafka-2,kafka-3", "host names of the brokers, comma separated")
	flag.Parse()
	if err := run(*dir, strings.Split(*hosts, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

func run(dir string, hosts []string) error {
	keystore := filepath.Join(dir, "broker-keystore.pem")
	if _, err := os.Stat(keystore); err == nil {
		return nil // made before; delete the directory to make new ones
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := testenv.NewCA(dir, "canon-compose")
	if err != nil {
		return fmt.Errorf("make the CA: %w", err)
	}
	certFile, keyFile, err := ca.Issue("broker", hosts...)
	if err != nil {
		return fmt.Errorf("make the brokers' certificate: %w", err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	files := map[string][]byte{
		keystore:                             append(key, cert...),
		filepath.Join(dir, "kafka-password"): []byte(hex.EncodeToString(b[:]) + "\n"),
	}
	for path, content := range files {
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{ca.CertFile, certFile, keyFile} {
		if err := os.Chmod(f, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("certs: made a CA (%s), the brokers' keystore and the SASL password in %s\n", ca.CertFile, dir)
	return nil
}
