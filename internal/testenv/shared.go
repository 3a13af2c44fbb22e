package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Shared is a Kafka broker and a ClickHouse server started once for a whole
// test run (every package of `go test ./...`), handed to the test processes
// through the environment variables of Env.
type Shared struct {
	servers []*server
	env     []string
}

// StartShared starts whichever of Kafka and ClickHouse the environment does
// not already give, concurrently.
func StartShared(ctx context.Context) (*Shared, error) {
	s := &Shared{}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
	)
	start := func(envVar string, fn func() (*server, error)) {
		if os.Getenv(envVar) != "" {
			return
		}
		wg.Go(func() {
			srv, err := fn()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			s.servers = append(s.servers, srv)
			s.env = append(s.env, envVar+"="+strings.Join(srv.addrs, ","))
		})
	}
	start(EnvKafkaBrokers, func() (*server, error) {
		k, err := StartKafka(ctx, KafkaOptions{})
		if err != nil {
			return nil, err
		}
		return k.srv, nil
	})
	start(EnvClickHouseAddr, func() (*server, error) { return StartClickHouse(ctx) })
	start(EnvS3Endpoint, func() (*server, error) { return StartS3(ctx) })
	wg.Wait()
	if len(errs) > 0 {
		s.Stop()
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return s, nil
}

// Env returns NAME=value entries to add to the test processes' environment.
func (s *Shared) Env() []string { return s.env }

// Summary says what runs where and how long each took to start.
func (s *Shared) Summary() string {
	var b strings.Builder
	for _, srv := range s.servers {
		version := ""
		if srv.name == "kafka" {
			version = " " + KafkaVersion
		}
		fmt.Fprintf(&b, "testenv: %s%s (%s) at %s, started in %.1fs\n",
			srv.name, version, srv.provider, strings.Join(srv.addrs, ","), srv.started.Seconds())
	}
	return b.String()
}

// Tails returns the last n lines of each server's log.
func (s *Shared) Tails(n int) string {
	var b strings.Builder
	for _, srv := range s.servers {
		if srv.tail == nil {
			continue
		}
		fmt.Fprintf(&b, "----- last %d lines of the %s log (%s) -----\n%s\n", n, srv.name, srv.provider, srv.tail(n))
	}
	return b.String()
}

// Stop stops every server, newest first.
func (s *Shared) Stop() {
	for i := len(s.servers) - 1; i >= 0; i-- {
		s.servers[i].stop()
	}
	s.servers = nil
	removeCanonBinary() // the S3 server's
}
