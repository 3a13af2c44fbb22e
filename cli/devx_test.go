package cli

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/testenv"
)

// pushN pushes n mutations of client c, one push each, waiting for each
// to be applied.
func pushN(t *testing.T, ctx context.Context, p *devProc, c string, n int) {
	t.Helper()
	w := client.New(p.http, client.WithToken(p.token)).Writer("dev", "demo", client.WriterConfig{ClientGroup: "g-" + c, Client: c})
	for i := range n {
		if _, err := w.Add("item.put", map[string]any{"collection": "notes", "id": fmt.Sprint(i), "data": i}); err != nil {
			t.Fatal(err)
		}
		out, err := w.Flush(ctx)
		if err != nil || len(out) != 1 || out[0].Status != client.Applied {
			t.Fatalf("push %d of %s: %+v, %v", i, c, out, err)
		}
	}
}

var logLine = regexp.MustCompile(`^time=\S+ level=`)

// The banner comes whole, after the start's log lines, so that the dev
// token does not scroll away between them; and the Kafka client library
// logs only its warnings, not six lines per transaction.
func TestDevBannerWholeAndKafkaQuiet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildCanon(t)
	p := startDev(t, ctx, bin, t.TempDir())
	waitReady(t, ctx, p.http)
	pushN(t, ctx, p, "c", 10)
	out := strings.Split(p.stop(t), "\n")

	first, last := -1, -1
	for i, l := range out {
		if strings.HasPrefix(l, "Canon dev is running") {
			first = i
		}
		if strings.Contains(l, "each client id takes a mutation id once") {
			last = i
		}
	}
	if first < 0 || last < first {
		t.Fatalf("no banner in:\n%s", strings.Join(out, "\n"))
	}
	for _, l := range out[first : last+1] {
		if logLine.MatchString(l) {
			t.Fatalf("a log line inside the banner: %q\n%s", l, strings.Join(out, "\n"))
		}
	}
	started := slices.IndexFunc(out, func(l string) bool { return strings.Contains(l, `msg="canon dev started"`) })
	restored := slices.IndexFunc(out, func(l string) bool { return strings.Contains(l, `msg="partition restored"`) })
	if started > first || restored > first {
		t.Errorf("start log lines (at %d and %d) after the banner (at %d)", started, restored, first)
	}
	kafkaInfo := 0
	for _, l := range out {
		if strings.Contains(l, "component=franz-go") && !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
			kafkaInfo++
		}
	}
	if kafkaInfo > 0 {
		t.Fatalf("%d lines of franz-go below warn in %d lines of log for 10 pushes:\n%s", kafkaInfo, len(out), strings.Join(out, "\n"))
	}
}

// The data dir and everything in it (the broker's logs, the store with
// every item body, keys.json, the local ClickHouse's data) is the user's
// only, also when an older canon dev had made the dir readable to all.
func TestDevDataIsPrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildCanon(t)
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o755); err != nil { // whatever the test's umask
		t.Fatal(err)
	}
	p := startDev(t, ctx, bin, data)
	waitReady(t, ctx, p.http)
	pushN(t, ctx, p, "c", 3)
	p.stop(t)

	var open []string
	kinds := map[string]int{}
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		kinds[strings.Split(rel, string(filepath.Separator))[0]]++
		if info.Mode().Perm()&0o077 != 0 {
			open = append(open, fmt.Sprintf("%v %s", info.Mode().Perm(), rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"kafka", "store", "keys.json"} {
		if kinds[sub] == 0 {
			t.Fatalf("no %s under the data dir: %v", sub, kinds)
		}
	}
	if len(open) > 0 {
		t.Fatalf("%d of the data dir's entries are open to others:\n%s", len(open), strings.Join(open, "\n"))
	}
}

// A Kafka of the laptop's own on the broker's port moves the embedded
// broker to a free port, which the banner names; the data dir works on
// another port after a restart, and a client.Writer of the same client
// goes on from the ids of the first run.
func TestDevBusyKafkaPortAndWriterResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := testenv.BuildCanon(t)
	data := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, port, _ := net.SplitHostPort(taken.Addr().String())

	p := startDev(t, ctx, bin, data, "--kafka-port", port)
	if p.brokers == taken.Addr().String() || !strings.Contains(p.out.String(), "port "+port+" was busy") {
		t.Fatalf("with port %s taken the banner says:\n%s", port, p.out.String())
	}
	waitReady(t, ctx, p.http)
	pushN(t, ctx, p, "c", 2)
	p.stop(t)

	p = startDev(t, ctx, bin, data, "--kafka-port", "0")
	defer p.stop(t)
	waitReady(t, ctx, p.http)
	w := client.New(p.http, client.WithToken(p.token)).Writer("dev", "demo", client.WriterConfig{ClientGroup: "g-c", Client: "c"})
	if _, err := w.Add("item.put", map[string]any{"collection": "notes", "id": "again", "data": 3}); err != nil {
		t.Fatal(err)
	}
	out, err := w.Flush(ctx)
	if err != nil || len(out) != 1 || out[0].Status != client.Applied || out[0].ID != 3 {
		t.Fatalf("a second run's Writer: %+v, %v; want id 3 applied", out, err)
	}
}

// Canon's loggers log from --log-level, the Kafka library's (component
// franz-go or kfake) from --kafka-log-level.
func TestLogLevelsPerComponent(t *testing.T) {
	for _, tc := range []struct {
		canon, kafka string
		want         string
	}{
		{"info", "warn", "canon-info canon-warn kafka-warn"},
		{"warn", "debug", "canon-warn kafka-debug kafka-info kafka-warn"},
		{"debug", "error", "canon-debug canon-info canon-warn"},
	} {
		var b strings.Builder
		g := &globalFlags{logLevel: tc.canon, kafkaLogLevel: tc.kafka, logFormat: "text"}
		log, err := g.logger(&b)
		if err != nil {
			t.Fatal(err)
		}
		franz, kfake := log.With("component", "franz-go"), log.With("component", "kfake")
		for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
			name := strings.ToLower(l.String())
			log.With("component", "sequencer").Log(context.Background(), l, "canon-"+name)
			franz.Log(context.Background(), l, "kafka-"+name)
			kfake.WithGroup("g").Log(context.Background(), l, "kafka-"+name)
		}
		var got []string
		for _, m := range regexp.MustCompile(`msg=(\S+)`).FindAllStringSubmatch(b.String(), -1) {
			if !slices.Contains(got, m[1]) {
				got = append(got, m[1])
			}
		}
		slices.Sort(got)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("--log-level %s --kafka-log-level %s logged %v, want %s", tc.canon, tc.kafka, got, tc.want)
		}
	}
	if _, err := (&globalFlags{logLevel: "info", kafkaLogLevel: "loud", logFormat: "text"}).logger(os.Stderr); err == nil ||
		!strings.Contains(err.Error(), "--kafka-log-level") {
		t.Fatalf("a bad --kafka-log-level: %v", err)
	}
}
