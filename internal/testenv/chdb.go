package testenv

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ChdbVersion is the PyPI release of chdb that gives the tests a current
// ClickHouse (chdb 4.4.0 embeds ClickHouse 26.9). The local server of the
// tests is Debian's 18.16, the oldest release Canon supports; SQL that
// Canon ships (migrations, documented queries) runs on both.
const ChdbVersion = "4.4.0"

//go:embed chdb_runner.py
var chdbRunner []byte

// CurrentClickHouse is a current ClickHouse release, embedded by chdb in
// a Python process of this test. It answers SQL as text: Exec and Query
// take whole statements (no bind arguments), Insert sends rows as
// JSONEachRow.
type CurrentClickHouse struct {
	// Version is the ClickHouse release, e.g. 26.9.2.1.
	Version string

	mu   sync.Mutex
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	dead error
}

var (
	chdbOnce   sync.Once
	chdbPython string
	chdbErr    error
)

// NewCurrentClickHouse starts a current ClickHouse for this test, with its
// data in a temporary directory, and stops it when the test ends. The
// first use installs chdb ChdbVersion with pip into a virtual environment
// under the cache dir; it needs python3 with its venv module.
func NewCurrentClickHouse(tb testing.TB) *CurrentClickHouse {
	tb.Helper()
	requireIntegration(tb)
	chdbOnce.Do(func() { chdbPython, chdbErr = installChdb() })
	if chdbErr != nil {
		tb.Fatalf("testenv: no current ClickHouse: %v", chdbErr)
	}
	dir := tb.TempDir()
	script := filepath.Join(dir, "runner.py")
	if err := os.WriteFile(script, chdbRunner, 0o644); err != nil {
		tb.Fatal(err)
	}
	answers, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(chdbPython, script, filepath.Join(dir, "data"))
	cmd.ExtraFiles = []*os.File{w}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("testenv: start the chdb runner: %v", err)
	}
	w.Close()
	c := &CurrentClickHouse{cmd: cmd, in: in, out: bufio.NewReaderSize(answers, 1<<20)}
	tb.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		answers.Close()
		if tb.Failed() {
			tb.Logf("testenv: chdb runner output:\n%s", tailString(logs.String(), 40))
		}
	})
	var hello struct{ Version string }
	if err := c.read(&hello); err != nil {
		tb.Fatalf("testenv: the chdb runner did not start: %v\n%s", err, tailString(logs.String(), 40))
	}
	c.Version = hello.Version
	return c
}

// installChdb makes the virtual environment with chdb once per cache
// dir and returns its python.
func installChdb() (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	venv := filepath.Join(cache, "chdb-"+ChdbVersion)
	python := filepath.Join(venv, "bin", "python")
	marker := filepath.Join(venv, "installed")
	if _, err := os.Stat(marker); err == nil {
		return python, nil
	}
	unlock, err := lockFile(venv + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(marker); err == nil {
		return python, nil // installed by another test process while we waited
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", errors.New("python3 not found: install it (Debian: `apt-get install -y python3 python3-venv`) to run the tests on a current ClickHouse")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	logPath := venv + "-install.log"
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	_ = os.RemoveAll(venv)
	for _, args := range [][]string{
		{py, "-m", "venv", venv},
		{python, "-m", "pip", "install", "--disable-pip-version-check", "chdb==" + ChdbVersion},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("install chdb %s (%s): %w (Debian needs `apt-get install -y python3-venv`); log %s:\n%s",
				ChdbVersion, strings.Join(args, " "), err, logPath, tailFile(logPath, 20))
		}
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return "", err
	}
	return python, nil
}

// Exec runs one statement.
func (c *CurrentClickHouse) Exec(ctx context.Context, query string) error {
	_, err := c.run(ctx, query, "TSVRaw")
	return err
}

// Insert sends rows, JSON objects one a line by column name, into table
// (database.table).
func (c *CurrentClickHouse) Insert(ctx context.Context, table string, jsonEachRow []byte) error {
	if len(jsonEachRow) == 0 {
		return nil
	}
	_, err := c.run(ctx, "INSERT INTO "+table+" FORMAT JSONEachRow\n"+string(jsonEachRow), "TSVRaw")
	return err
}

// Query runs a query and returns its rows, each value as text: strings as
// they are, numbers as ClickHouse writes them (0.33, 12; 64-bit integers
// arrive quoted, which changes nothing here), dates and times
// as 2006-01-02 and 2006-01-02 15:04:05, NULL as NULL, arrays and tuples
// as compact JSON.
func (c *CurrentClickHouse) Query(ctx context.Context, query string) ([][]string, error) {
	out, err := c.run(ctx, query, "JSONCompactEachRow")
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var vals []any
		if err := dec.Decode(&vals); err != nil {
			return nil, fmt.Errorf("read a row of %q: %w", line, err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			switch x := v.(type) {
			case string:
				row[i] = x
			case json.Number:
				row[i] = x.String()
			case nil:
				row[i] = "NULL"
			default:
				b, _ := json.Marshal(x)
				row[i] = string(b)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (c *CurrentClickHouse) run(ctx context.Context, query, format string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return "", c.dead
	}
	req, err := json.Marshal(map[string]string{"q": query, "fmt": format})
	if err != nil {
		return "", err
	}
	type answer struct {
		Out string `json:"out"`
		Err string `json:"err"`
	}
	done := make(chan error, 1)
	var ans answer
	go func() {
		if _, err := c.in.Write(append(req, '\n')); err != nil {
			done <- err
			return
		}
		done <- c.read(&ans)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		// The runner cannot be interrupted mid-statement: stop it, and
		// every later call reports why.
		_ = c.cmd.Process.Kill()
		err = errors.Join(ctx.Err(), <-done) // the read fails once the runner is killed
	}
	if err != nil {
		c.dead = fmt.Errorf("chdb runner: %w", err)
		return "", c.dead
	}
	if ans.Err != "" {
		return "", fmt.Errorf("ClickHouse %s: %s", c.Version, strings.TrimSpace(ans.Err))
	}
	return ans.Out, nil
}

func (c *CurrentClickHouse) read(v any) error {
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
