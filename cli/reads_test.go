package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
)

// readTries is how many pushes each deployment shape of
// TestReadsSeeWhatTheNodeAnnounced makes.
const readTries = 1000

// A node announces a version only once its own read API serves it, in
// every deployment shape: a read right after a push answered with
// ?wait=applied sees the push (read-your-writes), and a Replicache pull
// sent the moment a websocket version message arrives (a poke) gets that
// version. The store of a node is written just after Kafka commits, so
// before the node waited for it about 1% of pokes and of
// read-your-writes were stale.
func TestReadsSeeWhatTheNodeAnnounced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs canon serve against a real Kafka broker")
	}
	k := testenv.NewKafka(t)
	keysPath, token := keysAndToken(t, "user:reader")

	serve := func(t *testing.T, prefix, name string, args ...string) *canonNode {
		args = append([]string{"serve", "--brokers", strings.Join(k.Brokers, ","), "--topic-prefix", prefix,
			"--topic-partitions", "2", "--keys", keysPath, "--http", "127.0.0.1:0",
			"--data", filepath.Join(testenv.ProcessDir(t, name), "data")}, args...)
		return startNode(t, name, args...)
	}
	t.Run("one node", func(t *testing.T) {
		prefix := k.Topic(t, "reads") + "."
		n := serve(t, prefix, "all", "--roles", "producer,sequencer,readapi")
		checkReads(t, n, n, token)
	})
	t.Run("read replica", func(t *testing.T) {
		prefix := k.Topic(t, "reads") + "."
		seq := serve(t, prefix, "sequencer", "--roles", "sequencer")
		replica := serve(t, prefix, "replica", "--roles", "producer,readapi")
		checkReads(t, seq, replica, token)
	})
}

// keysAndToken writes a key file for canon serve's --keys and issues a
// write token of acme's projects for subject with it.
func keysAndToken(t *testing.T, subject string) (keysPath, token string) {
	t.Helper()
	keysPath = filepath.Join(t.TempDir(), "keys.json")
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	if err := keys.Save(keysPath); err != nil {
		t.Fatal(err)
	}
	token, err := keys.Issue(auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite},
		RegisteredClaims: jwt.RegisteredClaims{Subject: subject}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return keysPath, token
}

// canonNode is a running `canon serve` with its HTTP address.
type canonNode struct {
	*testenv.CanonProcess
	base string // http://host:port
}

var serveHTTP = regexp.MustCompile(`msg="canon serve started".* http=(\S+)`)

func startNode(t *testing.T, name string, args ...string) *canonNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := testenv.NewCanonProcess(t, name, args...)
	p.Start(ctx)
	m := serveHTTP.FindStringSubmatch(p.CurrentLog())
	if m == nil {
		t.Fatalf("%s did not log its HTTP address", name)
	}
	canontest.Wait(t, ctx, name+" ready", func() (bool, error) { return p.Ready(), nil })
	t.Cleanup(p.CheckLog)
	return &canonNode{CanonProcess: p, base: "http://" + m[1]}
}

// checkReads pushes readTries mutations to node with ?wait=applied and
// reads each one back there at once, while a websocket on node pulls (as
// Replicache does on a poke) the moment each version arrives; ready is
// the node to wait for before pushing (the sequencer).
func checkReads(t *testing.T, ready, node *canonNode, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	canontest.Wait(t, ctx, "the sequencer ready", func() (bool, error) { return ready.Ready(), nil })
	hc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string, body any, out any) error {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, node.base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return json.Unmarshal(b, out)
	}

	// The websocket: every version message is a poke, answered by a pull
	// from the cookie before it.
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, strings.Replace(node.base, "http", "ws", 1)+
		"/v1/projects/acme/reads/ws?token="+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var hello struct{ Type string }
	if err := ws.ReadJSON(&hello); err != nil || hello.Type != "hello" {
		t.Fatalf("first message %+v, %v; want hello", hello, err)
	}
	var (
		mu         sync.Mutex
		pokes      int
		stalePokes []string
		pokeErr    error
		lastPoke   uint64
		pokedLast  = make(chan struct{})
	)
	go func() {
		for {
			var m struct {
				Type    string `json:"type"`
				Version uint64 `json:"version"`
			}
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			if m.Type != "version" {
				continue
			}
			var cookie any
			if m.Version > 1 {
				cookie = m.Version - 1
			}
			var pulled struct {
				Cookie json.RawMessage `json:"cookie"`
			}
			err := call(http.MethodPost, "/replicache/v1/acme/reads/pull",
				map[string]any{"pullVersion": 1, "clientGroupID": "poked", "cookie": cookie, "profileID": "p", "schemaVersion": ""}, &pulled)
			got, perr := strconv.ParseUint(string(pulled.Cookie), 10, 64)
			mu.Lock()
			pokes++
			switch {
			case err != nil:
				pokeErr = err
			case perr != nil || got < m.Version:
				stalePokes = append(stalePokes, fmt.Sprintf("v%d answered cookie %s", m.Version, pulled.Cookie))
			}
			lastPoke = m.Version
			if m.Version == readTries {
				close(pokedLast)
			}
			mu.Unlock()
		}
	}()

	var staleReads []string
	for i := uint64(1); i <= readTries; i++ {
		var pushed struct {
			Outcomes []struct {
				Status  string `json:"status"`
				Version uint64 `json:"version"`
			} `json:"outcomes"`
		}
		err := call(http.MethodPost, "/v1/projects/acme/reads/push?wait=applied", map[string]any{
			"clientGroup": "g", "mutations": []map[string]any{{"client": "c", "id": i, "name": "item.put",
				"args": map[string]any{"collection": "t", "id": "x", "data": map[string]uint64{"n": i}}}}}, &pushed)
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		if len(pushed.Outcomes) != 1 || pushed.Outcomes[0].Status != "applied" || pushed.Outcomes[0].Version != i {
			t.Fatalf("push %d: outcomes %+v, want applied in version %d", i, pushed.Outcomes, i)
		}
		var read struct {
			LastMutationID uint64 `json:"lastMutationID"`
		}
		if err := call(http.MethodGet, "/v1/projects/acme/reads/clients/c", nil, &read); err != nil {
			if !strings.Contains(err.Error(), " 404 ") {
				t.Fatalf("read after push %d: %v", i, err)
			}
		}
		if read.LastMutationID < i {
			staleReads = append(staleReads, fmt.Sprintf("push %d read last id %d", i, read.LastMutationID))
		}
	}
	select {
	case <-pokedLast:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the websocket announced versions up to %d of %d", lastPoke, readTries)
	}
	mu.Lock()
	defer mu.Unlock()
	if pokeErr != nil {
		t.Errorf("a pull on a poke: %v", pokeErr)
	}
	t.Logf("stale reads after ?wait=applied: %d of %d; stale pulls after a version message: %d of %d",
		len(staleReads), readTries, len(stalePokes), pokes)
	if len(staleReads) > 0 {
		t.Errorf("%d of %d reads right after ?wait=applied missed the write: %v", len(staleReads), readTries, staleReads)
	}
	if len(stalePokes) > 0 {
		t.Errorf("%d of %d pulls right after a version message missed it: %v", len(stalePokes), pokes, stalePokes)
	}
}
