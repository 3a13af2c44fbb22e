package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// EnvS3Endpoint gives tests an S3-compatible server (http://host:port)
// that holds the bucket S3Bucket; `make test` sets it through
// internal/testenv/run.
const EnvS3Endpoint = "CANON_TEST_S3_ENDPOINT"

// S3Bucket is the bucket the test S3 server creates.
const S3Bucket = "canon-test"

// s3Package is the S3 server: gofakes3 from the Go module proxy, built
// with `go build` like the canon binary, so it needs no network beyond
// the module proxy, no JVM and no Docker.
const s3Package = "github.com/canon-sync/canon/internal/testenv/s3server"

var (
	s3Once sync.Once
	s3Srv  *server
	s3Err  error
)

// S3 is an S3-compatible server reachable by a test.
type S3 struct {
	// Endpoint is its http://host:port.
	Endpoint string
	Provider string
}

// URL returns a gocloud.dev/blob URL of the server's bucket; objects of
// different tests are kept apart by the prefix a test chooses.
func (s *S3) URL() string {
	return "s3://" + S3Bucket + "?endpoint=" + s.Endpoint + "&use_path_style=true&region=us-east-1&disable_https=true"
}

// Prefix returns a key prefix unique to the test.
func (s *S3) Prefix(tb testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return sanitize(tb.Name()) + "-" + hex.EncodeToString(b[:]) + "/"
}

// NewS3 returns the shared S3 server of this test process, starting it
// on first use, and sets the AWS credentials the server accepts (any)
// in the environment of the test process if none are set.
func NewS3(tb testing.TB) *S3 {
	tb.Helper()
	requireIntegration(tb)
	s3Once.Do(func() {
		if ep := os.Getenv(EnvS3Endpoint); ep != "" {
			s3Srv = &server{name: "s3", provider: ProviderEnv, addrs: []string{ep}}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		s3Srv, s3Err = StartS3(ctx)
		if s3Err == nil {
			register(s3Srv)
		}
	})
	if s3Err != nil {
		tb.Fatalf("testenv: no S3 server: %v", s3Err)
	}
	SetS3Credentials()
	dumpOnFailure(tb, s3Srv)
	return &S3{Endpoint: s3Srv.addrs[0], Provider: s3Srv.provider}
}

// SetS3Credentials sets placeholder AWS credentials in the process
// environment unless some are set: the test server accepts any, and the
// AWS SDK refuses to sign without.
func SetS3Credentials() {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		_ = os.Setenv("AWS_ACCESS_KEY_ID", "canon-test")
		_ = os.Setenv("AWS_SECRET_ACCESS_KEY", "canon-test")
	}
}

// StartS3 builds and starts the S3 server on a free 127.0.0.1 port, with
// the bucket S3Bucket, and waits until it answers.
func StartS3(ctx context.Context) (*server, error) {
	start := time.Now()
	programs.mu.Lock()
	b, ok := programs.built[s3Package]
	if !ok {
		b = buildProgram(s3Package)
		if programs.built == nil {
			programs.built = make(map[string]builtProgram)
		}
		programs.built[s3Package] = b
	}
	programs.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	work, err := os.MkdirTemp("", "canon-s3-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := hostPort(ports[0])
	proc := newProcess("s3", work, filepath.Join(work, "s3.log"), nil, b.path, "-addr", addr, "-bucket", S3Bucket)
	if err := proc.start(); err != nil {
		return nil, err
	}
	endpoint := "http://" + addr
	srv := &server{name: "s3", provider: ProviderLocal, addrs: []string{endpoint}, tail: proc.tail,
		stop: func() {
			proc.stop(5 * time.Second)
			if !keepServers() {
				os.RemoveAll(work)
			}
		}}
	err = proc.waitFor(ctx, "answering", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/"+S3Bucket+"?list-type=2&max-keys=1", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("list bucket %s: %s", S3Bucket, resp.Status)
		}
		return nil
	})
	if err != nil {
		srv.stop()
		return nil, errors.Join(errors.New("start the S3 server"), err)
	}
	srv.started = time.Since(start)
	return srv, nil
}
