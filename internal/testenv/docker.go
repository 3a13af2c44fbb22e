package testenv

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

var (
	dockerOnce sync.Once
	dockerOK   bool
)

// dockerAvailable reports whether a Docker engine answers. A docker CLI
// without an engine (as on the CI machines) is not enough.
func dockerAvailable(ctx context.Context) bool {
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			return
		}
		defer cli.Close()
		_, err = cli.Ping(ctx, client.PingOptions{})
		dockerOK = err == nil
	})
	return dockerOK
}

// startDockerKafka runs the official apache/kafka image with host
// networking, so the broker listens on 127.0.0.1 ports picked here and its
// advertised address is the one clients dial, with no port-mapping tricks.
// Kill and Restart stop the container without grace and start it again on
// the same ports and data.
func startDockerKafka(ctx context.Context, opts KafkaOptions) (*KafkaServer, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	env := map[string]string{"CLUSTER_ID": kafkaClusterID()}
	props := kafkaProps("/var/lib/kafka/data", ports[0], ports[1], opts.Configs)
	for k, v := range props {
		env["KAFKA_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = v
	}
	ctr, err := testcontainers.Run(ctx, KafkaImage,
		testcontainers.WithEnv(env),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }),
	)
	if err != nil {
		return nil, err
	}
	addrs := []string{hostPort(ports[0])}
	logs := func(n int) string { return containerTail(ctr, n) }
	k := &KafkaServer{provider: ProviderDocker}
	k.srv = &server{
		name:     "kafka",
		provider: ProviderDocker,
		addrs:    addrs,
		tail:     logs,
		stop:     func() { _ = testcontainers.TerminateContainer(ctr) },
	}
	wait := func(ctx context.Context) error {
		for {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := pingKafka(cctx, addrs)
			cancel()
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafka container not answering: %w (last error: %w)\n%s", ctx.Err(), err, logs(40))
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	k.kill = func() {
		noGrace := time.Duration(0)
		_ = ctr.Stop(context.Background(), &noGrace)
	}
	k.restart = func(ctx context.Context) error {
		if err := ctr.Start(ctx); err != nil {
			return err
		}
		return wait(ctx)
	}
	if err := wait(ctx); err != nil {
		k.srv.stop()
		return nil, err
	}
	return k, nil
}

func containerTail(ctr testcontainers.Container, n int) string {
	rc, err := ctr.Logs(context.Background())
	if err != nil {
		return fmt.Sprintf("(no container log: %v)", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Sprintf("(read container log: %v)", err)
	}
	return lastLines(string(b), n)
}
