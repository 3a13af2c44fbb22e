package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

// Two nodes with every role share the partitions; one is killed with
// SIGKILL while pushes go on through the other, which takes its partition
// over: the survivor's changelog feed fetched that partition from the
// broker and is fed by its own sequencer after the takeover. Every push
// through the survivor is answered applied in the version it made (a
// version the feed skipped would leave its push waiting, one it handed
// twice would not change that, but the websockets check order), and a
// websocket on the survivor gets each version once, in order.
func TestFeedAcrossATakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs canon serve against a real Kafka broker")
	}
	k := testenv.NewKafka(t)
	keysPath, token := keysAndToken(t, "user:feed")
	prefix := k.Topic(t, "feed") + "."
	serve := func(name string) *canonNode {
		return startNode(t, name, "serve", "--brokers", strings.Join(k.Brokers, ","), "--topic-prefix", prefix,
			"--topic-partitions", "2", "--keys", keysPath, "--http", "127.0.0.1:0", "--session-timeout", "6s",
			"--data", filepath.Join(testenv.ProcessDir(t, name), "data"), "--roles", "producer,sequencer,readapi")
	}
	a, b := serve("a"), serve("b")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	canontest.Wait(t, ctx, "both sequencers owning a partition", func() (bool, error) {
		na, _ := a.Metric("canon_sequencer_owned_partitions")
		nb, _ := b.Metric("canon_sequencer_owned_partitions")
		return na == 1 && nb == 1, nil
	})
	// One project in each partition: one of them is a's.
	var projects []string
	for i, seen := 0, map[int32]bool{}; len(projects) < 2; i++ {
		name := fmt.Sprintf("doc%d", i)
		if p := schemas.Partition(schemas.ProjectKey("acme", name), 2); !seen[p] {
			seen[p] = true
			projects = append(projects, name)
		}
	}

	// No retries: a retried push would be a duplicate, not applied in
	// its version.
	cl := client.New(b.base, client.WithToken(token), client.WithRetries(0, 0),
		client.WithHTTPClient(&http.Client{Timeout: 90 * time.Second}))
	push := func(project string, id uint64) error {
		res, err := cl.Push(ctx, "acme", project, client.Push{ClientGroup: "g-" + project, Mutations: []client.Mutation{{Client: "c-" + project,
			ID: id, Name: "item.put", Args: json.RawMessage(fmt.Sprintf(`{"collection":"t","id":"x","data":{"n":%d}}`, id))}}},
			client.PushOptions{Wait: true, Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if len(res.Outcomes) != 1 || res.Outcomes[0].Status != client.Applied || res.Outcomes[0].Version != id {
			return fmt.Errorf("push %d to %s: %+v, want applied in version %d", id, project, res.Outcomes, id)
		}
		return nil
	}

	const before, after = 15, 40
	// Pushes before the kill, through b: a's partition reaches b's feed
	// from the broker.
	for id := uint64(1); id <= before; id++ {
		for _, project := range projects {
			if err := push(project, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The kill, while pushes to both partitions are in flight.
	var wg sync.WaitGroup
	errs := make(chan error, len(projects))
	for _, project := range projects {
		wg.Go(func() {
			for id := uint64(before + 1); id <= before+after/2; id++ {
				if err := push(project, id); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // a push in flight, not a condition to wait for
	a.Kill()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	canontest.Wait(t, ctx, "b owning both partitions", func() (bool, error) {
		n, err := b.Metric("canon_sequencer_owned_partitions")
		return n == 2, err
	})

	// Websockets on b, from the current version: the rest arrive live,
	// from b's own sequencer through its feed.
	type seenVersions struct {
		versions []uint64
		err      error
	}
	results := make([]chan seenVersions, len(projects))
	for i, project := range projects {
		from := before + after/2
		ws, _, err := websocket.DefaultDialer.DialContext(ctx, strings.Replace(b.base, "http", "ws", 1)+
			fmt.Sprintf("/v1/projects/acme/%s/ws?from=%d&token=%s", project, from, token), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		results[i] = make(chan seenVersions, 1)
		go func() {
			var got seenVersions
			defer func() { results[i] <- got }()
			for len(got.versions) < after-after/2 {
				var m struct {
					Type    string `json:"type"`
					Version uint64 `json:"version"`
				}
				if err := ws.ReadJSON(&m); err != nil {
					got.err = err
					return
				}
				switch m.Type {
				case "version":
					got.versions = append(got.versions, m.Version)
				case "reset":
					got.err = fmt.Errorf("reset %+v", m)
					return
				}
			}
		}()
	}
	for id := uint64(before + after/2 + 1); id <= before+after; id++ {
		for _, project := range projects {
			if err := push(project, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, project := range projects {
		var got seenVersions
		select {
		case got = <-results[i]:
		case <-ctx.Done():
			t.Fatalf("%s: the websocket did not get the versions in time", project)
		}
		if got.err != nil {
			t.Fatalf("%s: websocket after versions %v: %v", project, got.versions, got.err)
		}
		for j, v := range got.versions {
			if want := uint64(before + after/2 + 1 + j); v != want {
				t.Fatalf("%s: the websocket got versions %v, want %d..%d once each, in order", project, got.versions, before+after/2+1, before+after)
			}
		}
	}
}
