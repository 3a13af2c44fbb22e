package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// On the real broker: pushes from many clients over HTTP land on the
// partition Java's partitioner picks, in order, and come out of the
// sequencer as versions, each mutation applied once.
func TestPushesBecomeVersions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 6
	pl := startPipeline(t, partitions)
	st, keys := pl.store, pl.keys

	const (
		projects          = 8
		clientsPerProject = 4
		pushes            = 3
		perPush           = 5
	)
	var wg sync.WaitGroup
	errs := make(chan error, projects*clientsPerProject)
	for pi := range projects {
		for ci := range clientsPerProject {
			wg.Go(func() {
				project := fmt.Sprintf("p%d", pi)
				client := fmt.Sprintf("%s-c%d", project, ci)
				c := auth.Claims{Org: "acme", Projects: []string{project}, Scopes: []string{auth.ScopeWrite}}
				c.Subject = "user:" + client
				tok, err := keys.Issue(c, time.Hour, time.Now())
				if err != nil {
					errs <- err
					return
				}
				id := 1
				for range pushes {
					var ms []string
					for range perPush {
						ms = append(ms, fmt.Sprintf(`{"client":%q,"id":%d,"name":"item.patch","args":{"collection":"c","id":%q,"data":{"n":%d}}}`,
							client, id, client, id))
						id++
					}
					// The first mutation of each client creates its item.
					if id == perPush+1 {
						ms[0] = fmt.Sprintf(`{"client":%q,"id":1,"name":"item.put","args":{"collection":"c","id":%q,"data":{"n":1}}}`, client, client)
					}
					body := fmt.Sprintf(`{"clientGroup":"g-%s","mutations":[%s]}`, client, strings.Join(ms, ","))
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, pl.url+"/v1/projects/acme/"+project+"/push", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tok)
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						errs <- err
						return
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						errs <- fmt.Errorf("%s: %d %s", client, resp.StatusCode, answer)
						return
					}
					want := schemas.Partition(schemas.ProjectKey("acme", project), partitions)
					if !strings.Contains(string(answer), fmt.Sprintf(`"partition":%d,`, want)) {
						errs <- fmt.Errorf("%s: answer %s is not on partition %d", client, answer, want)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every mutation comes out as one applied version, in each client's
	// order.
	total := uint64(clientsPerProject * pushes * perPush)
	for pi := range projects {
		project := fmt.Sprintf("p%d", pi)
		for {
			h, err := st.Head("acme", project, "main")
			if err != nil {
				t.Fatal(err)
			}
			if h.Version == total {
				break
			}
			if h.Version > total {
				t.Fatalf("%s has %d versions, more than the %d mutations", project, h.Version, total)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %d versions of %d", project, h.Version, total)
			case <-time.After(50 * time.Millisecond):
			}
		}
		vs, err := st.Versions("acme", project, "main", 1, int(total))
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]uint64{}
		for _, v := range vs {
			for _, o := range v.Mutations {
				if o.Status != schemas.StatusApplied || o.ID != last[o.Client]+1 || o.Principal != "user:"+o.Client {
					t.Fatalf("%s v%d: %+v after id %d", project, v.Version, o, last[o.Client])
				}
				last[o.Client] = o.ID
			}
		}
		for ci := range clientsPerProject {
			if got := last[fmt.Sprintf("%s-c%d", project, ci)]; got != pushes*perPush {
				t.Fatalf("%s client %d: last id %d", project, ci, got)
			}
		}
	}
}
