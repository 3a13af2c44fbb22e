// Command s3server is the S3-compatible object store of Canon's tests and
// of a local `canon serve --checkpoint-url s3://…`: gofakes3 (a Go S3
// server, built from the Go module proxy like the rest of Canon) on one
// address, with its buckets in memory: what it holds goes with it.
//
//	go run ./internal/testenv/s3server -addr 127.0.0.1:9000 -bucket canon-checkpoints
//
// It accepts any credentials. It prints "s3server listening on http://ADDR"
// once it serves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on")
	buckets := flag.String("bucket", "canon-checkpoints", "comma-separated buckets to create")
	flag.Parse()
	if err := run(*addr, *buckets); err != nil {
		log.Fatal(err)
	}
}

func run(addr, buckets string) error {
	backend := s3mem.New()
	for _, name := range strings.Split(buckets, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if err := backend.CreateBucket(name); err != nil && !gofakes3.HasErrorCode(err, gofakes3.ErrBucketAlreadyExists) {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("s3server listening on http://%s\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
