package canontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// fakeTB records the message Fatalf gets and ends the goroutine, as
// testing's does.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// wait runs Wait on a fakeTB and returns what it failed with, "" if it
// returned.
func wait(d time.Duration, cond func() (bool, error)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		Wait(f, ctx, "the thing", cond)
	}()
	<-done
	return f.fatal
}

func TestWait(t *testing.T) {
	n := 0
	if msg := wait(time.Minute, func() (bool, error) { n++; return n == 5, nil }); msg != "" || n != 5 {
		t.Errorf("a condition that holds at the fifth try: %q after %d tries", msg, n)
	}
	msg := wait(50*time.Millisecond, func() (bool, error) { return false, Pending("at %d", 3) })
	if !strings.HasPrefix(msg, "timed out after ") || !strings.HasSuffix(msg, " waiting for the thing: still at 3") {
		t.Errorf("a condition that never holds: %q", msg)
	}
	msg = wait(50*time.Millisecond, func() (bool, error) { return false, nil })
	if !strings.HasSuffix(msg, " waiting for the thing") {
		t.Errorf("a condition that never holds, without a state: %q", msg)
	}
	n = 0
	msg = wait(time.Minute, func() (bool, error) { n++; return false, errors.New("broken") })
	if msg != "the thing: broken" || n != 1 {
		t.Errorf("a condition that fails: %q after %d tries", msg, n)
	}
}

func TestGenIsReproducible(t *testing.T) {
	run := func(seed uint64) ([]byte, map[string]int) {
		g := NewGen(seed)
		var b bytes.Buffer
		statuses := map[string]int{}
		for i := range 2000 {
			client := fmt.Sprintf("c%d", i%4)
			m := &schemas.Mutation{Org: "acme", Project: "p", Branch: "main", Client: client, ID: uint64(i/4 + 1)}
			statuses[g.Next(m)]++
			fmt.Fprintf(&b, "%s %d %s %s\n", m.Client, m.ID, m.Name, m.Args)
		}
		return b.Bytes(), statuses
	}
	a, st := run(7)
	b, _ := run(7)
	c, _ := run(8)
	if !bytes.Equal(a, b) {
		t.Error("two generators of one seed made different mutations")
	}
	if bytes.Equal(a, c) {
		t.Error("generators of two seeds made the same mutations")
	}
	if st[schemas.StatusApplied] == 0 || st[schemas.StatusError] == 0 {
		t.Errorf("statuses %v: want applied and error outcomes", st)
	}
	for _, name := range []string{"item.put", "item.patch", "item.splice", "item.delete", "project.set", "no.such.mutator"} {
		if !bytes.Contains(a, []byte(" "+name+" ")) {
			t.Errorf("no %s in 2000 mutations", name)
		}
	}
}
