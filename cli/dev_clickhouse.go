package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/chserver"
)

// devClickHouseFlags say whether and where `canon dev` runs a ClickHouse
// of its own for the history tables.
type devClickHouseFlags struct {
	local bool
	port  int
}

// defaultDevClickHousePort is the native port of the ClickHouse `canon
// dev` starts, away from a ClickHouse the machine may already run on 9000.
const defaultDevClickHousePort = 19000

func (f *devClickHouseFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.local, "clickhouse-local", true,
		"without --clickhouse, start the installed clickhouse-server with its data under DATA/clickhouse and project the history into it")
	cmd.Flags().IntVar(&f.port, "clickhouse-port", defaultDevClickHousePort,
		"native protocol port of the local ClickHouse on 127.0.0.1 (0: a free one; a busy port is replaced by a free one)")
}

// startDevClickHouse starts the local ClickHouse of `canon dev` when no
// ClickHouse was given and clickhouse-server is installed, and points the
// projector at it. It returns the function that stops it (nil when none
// runs). A missing clickhouse-server is no error: the projector is off and
// says how to install it.
func startDevClickHouse(ctx context.Context, f *devClickHouseFlags, data string, log *slog.Logger) (stop func(), err error) {
	ch := activeClickHouse.Load()
	if ch == nil || len(ch.addr) > 0 || !f.local {
		return nil, nil
	}
	if chserver.FindBinary() == nil {
		ch.offNote = fmt.Sprintf("off: clickhouse-server is not installed; install it with\n"+
			"              %s\n"+
			"              and start canon dev again (or pass --clickhouse host:port)", chserver.InstallCommand)
		return nil, nil
	}
	if f.port < 0 || f.port > 65535 {
		return nil, usageError{fmt.Errorf("--clickhouse-port %d is not a port: pass 0 to 65535", f.port)}
	}
	port := f.port
	if port != 0 && !chserver.PortFree(port) {
		log.Warn("the local ClickHouse's port is busy; using a free one", "port", port)
		port = 0
	}
	httpPort := 0
	if port != 0 && port+1 <= 65535 && chserver.PortFree(port+1) {
		httpPort = port + 1
	}
	dir := filepath.Join(data, "clickhouse")
	log.Info("starting the local ClickHouse", "dir", dir)
	t0 := time.Now()
	s, err := chserver.Start(ctx, chserver.Config{Dir: dir, TCPPort: port, HTTPPort: httpPort})
	if err != nil {
		return nil, fmt.Errorf("start the local ClickHouse in %s (--clickhouse-local=false runs without it): %w", dir, err)
	}
	log.Info("local ClickHouse started", "addr", s.Addr, "in", time.Since(t0).Round(time.Millisecond))
	ch.addr = []string{s.Addr}
	ch.localDir = dir
	return func() {
		s.Stop(30 * time.Second)
		log.Info("local ClickHouse stopped; its data is kept", "dir", dir)
	}, nil
}

// printTryIt prints three commands a newcomer can paste: a push, a read
// and, when the history runs, a query of it in ClickHouse.
func printTryIt(w io.Writer, base, token string) {
	fmt.Fprintf(w, "  try         export TOKEN=%s\n", token)
	fmt.Fprintf(w, "              curl -X POST '%s/v1/projects/dev/demo/push?wait=applied' -H \"Authorization: Bearer $TOKEN\" \\\n"+
		"                -H 'Content-Type: application/json' -d '{\"clientGroup\":\"cg-1\",\"mutations\":[{\"client\":\"c-1\",\"id\":1,\"name\":\"item.put\",\"args\":{\"collection\":\"notes\",\"id\":\"n1\",\"data\":{\"text\":\"hello\"}}}]}'\n", base)
	fmt.Fprintf(w, "              curl -H \"Authorization: Bearer $TOKEN\" '%s/v1/projects/dev/demo/versions?from=1'\n", base)
	if ch := activeClickHouse.Load(); ch != nil && len(ch.addr) > 0 {
		host, port, err := net.SplitHostPort(ch.addr[0])
		if err != nil {
			host, port = ch.addr[0], "9000"
		}
		fmt.Fprintf(w, "              clickhouse-client --host %s --port %s --query \\\n"+
			"                \"SELECT version, client, name, status FROM %s.mutations FINAL WHERE org = 'dev' AND project = 'demo' ORDER BY version\"\n",
			host, port, ch.database)
	}
	fmt.Fprintf(w, "              (each client id takes a mutation id once: send the next push with \"id\":2)\n\n")
}

// historyLine is the banner line of the history projector in `canon dev`.
func (f *clickhouseFlags) historyLine() string {
	if len(f.addr) == 0 {
		if f.offNote != "" {
			return f.offNote
		}
		return "off (project edit history into ClickHouse: canon dev --clickhouse localhost:9000)"
	}
	where := strings.Join(f.addr, ",")
	if f.localDir != "" {
		where += " (local, data in " + f.localDir + ")"
	}
	return fmt.Sprintf("ClickHouse %s, database %s (see docs/analytics.md)", where, f.database)
}
