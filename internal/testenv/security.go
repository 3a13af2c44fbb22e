package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority made by a test, to sign the certificates
// of a TLS listener and of clients.
type CA struct {
	// CertFile is the CA's certificate, PEM: what clients trust.
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// NewCA makes a CA whose files go to dir.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{CertFile: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue signs a certificate for name, valid for 127.0.0.1, localhost and
// hosts, for servers and clients, and writes it and its key (PKCS #8, not
// encrypted) as PEM files.
func (ca *CA) Issue(name string, hosts ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     append([]string{"localhost"}, hosts...),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(ca.dir, name+"-cert.pem"), filepath.Join(ca.dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", pk); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// KafkaSecurity describes the secured listeners of a broker started with
// KafkaOptions.Security.
type KafkaSecurity struct {
	// SASLSSLBrokers is the SASL_SSL listener: PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512 (user User, password Password) and OAUTHBEARER
	// (unsigned tokens, as OAuthToken makes).
	SASLSSLBrokers []string
	// SSLBrokers is the SSL listener that requires a client certificate
	// signed by CA (mTLS).
	SSLBrokers []string
	// CA signs the broker's certificate; clients trust CA.CertFile and
	// may get certificates from CA.Issue.
	CA             *CA
	User, Password string
}

// OAuthToken returns an unsigned JWT for subject, which the broker's
// default (unsecured, for tests only) OAUTHBEARER validator accepts.
func (s *KafkaSecurity) OAuthToken(subject string) string {
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now().Unix()
	return enc([]byte(`{"alg":"none"}`)) + "." +
		enc(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, subject, now, now+3600)) + "."
}

// securityProps are the server.properties of the secured listeners.
func securityProps(s *KafkaSecurity, keystore string, port, controllerPort, saslPort, sslPort int) map[string]string {
	jaas := func(module, opts string) string {
		return "org.apache.kafka.common.security." + module + " required" + opts + ";"
	}
	return map[string]string{
		"ssl.keystore.type":                 "PEM",
		"ssl.keystore.location":             keystore,
		"ssl.truststore.type":               "PEM",
		"ssl.truststore.location":           s.CA.CertFile,
		"listener.name.ssl.ssl.client.auth": "required",
		"sasl.enabled.mechanisms":           "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
		"listener.name.sasl_ssl.plain.sasl.jaas.config": jaas("plain.PlainLoginModule",
			fmt.Sprintf(` username=%q password=%q user_%s=%q`, s.User, s.Password, s.User, s.Password)),
		"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas("scram.ScramLoginModule", ""),
		"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas("scram.ScramLoginModule", ""),
		"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": jaas("oauthbearer.OAuthBearerLoginModule",
			` unsecuredLoginStringClaim_sub="broker"`),
		"listeners": fmt.Sprintf("PLAINTEXT://%s,CONTROLLER://%s,SASL_SSL://%s,SSL://%s",
			hostPort(port), hostPort(controllerPort), hostPort(saslPort), hostPort(sslPort)),
		"advertised.listeners": fmt.Sprintf("PLAINTEXT://%s,SASL_SSL://%s,SSL://%s",
			hostPort(port), hostPort(saslPort), hostPort(sslPort)),
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
	}
}

// scramArgs are the StorageTool arguments that create the SCRAM user.
func (s *KafkaSecurity) scramArgs() []string {
	var args []string
	for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, s.User, s.Password))
	}
	return args
}

// newKafkaSecurity makes the CA, the broker's keystore (its key and
// certificate in one PEM file) and the credentials, in dir.
func newKafkaSecurity(dir string, saslPort, sslPort int) (*KafkaSecurity, string, error) {
	ca, err := NewCA(dir, "kafka-test")
	if err != nil {
		return nil, "", err
	}
	certFile, keyFile, err := ca.Issue("broker")
	if err != nil {
		return nil, "", err
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return nil, "", err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, "", err
	}
	keystore := filepath.Join(dir, "broker-keystore.pem")
	if err := os.WriteFile(keystore, append(key, cert...), 0o600); err != nil {
		return nil, "", err
	}
	return &KafkaSecurity{
		SASLSSLBrokers: []string{hostPort(saslPort)},
		SSLBrokers:     []string{hostPort(sslPort)},
		CA:             ca,
		User:           "canon",
		Password:       "canon-secret-" + randSuffix(),
	}, keystore, nil
}
