package loadgen

import (
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// The workloads.
const (
	// WorkloadMix is DefaultMix-like mixes of small and large edits in
	// batches (`make bench`).
	WorkloadMix = "mix"
	// WorkloadEdits is the side-by-side shape of issue 22 (Canon against
	// Yorkie): every push is one edit of one field of a small object
	// (item.patch), each writer keeps one edit in flight and waits for
	// `applied`, a subscriber (websocket) per document.
	WorkloadEdits = "edits"
)

// editCollection and editItem name the small object of each document that
// the edits workload patches; the warm-up creates it.
const (
	editCollection = "objects"
	editItem       = "o"
)

// editObject is the object the warm-up creates in every document.
func editObject() json.RawMessage {
	return json.RawMessage(`{"collection":"` + editCollection + `","id":"` + editItem + `","data":{"title":"bench","n":0}}`)
}

// editOp is edit n of a writer: it sets the writer's own field of the
// document's object, so that concurrent writers never conflict and every
// edit applies.
func editOp(client string, n int) op {
	return op{name: "item.patch", args: json.RawMessage(`{"collection":"` + editCollection + `","id":"` + editItem +
		`","data":{"` + client + `":` + strconv.Itoa(n) + `}}`)}
}

// push is one push of a client: the document (index into run.projects)
// and its mutations.
type push struct {
	doc int
	ops []op
}

// source makes one client's pushes, deterministically: the raw baseline
// makes a second source with the same settings and gets the same records.
type source interface{ next() push }

// mixSource is the mix workload: batches from a generator, one project.
type mixSource struct {
	gen *generator
	doc int
}

func (s *mixSource) next() push { return push{doc: s.doc, ops: s.gen.nextBatch()} }

// editSource is the edits workload: one edit per push, round robin over
// the client's documents.
type editSource struct {
	client string
	docs   []int
	n      int
}

func (s *editSource) next() push {
	p := push{doc: s.docs[s.n%len(s.docs)], ops: []op{editOp(s.client, s.n)}}
	s.n++
	return p
}

// docsOf returns the documents client i writes: with at least as many
// documents as clients, every document has one writer (documents i,
// i+Clients, …); with fewer, clients share them (document i mod Projects).
func (c *Config) docsOf(i int) []int {
	if c.Projects <= c.Clients {
		return []int{i % c.Projects}
	}
	var docs []int
	for d := i; d < c.Projects; d += c.Clients {
		docs = append(docs, d)
	}
	return docs
}

// newSource is client i's source of pushes.
func (c *Config) newSource(i int) source {
	name := clientName(i)
	if c.Workload == WorkloadEdits {
		return &editSource{client: name, docs: c.docsOf(i)}
	}
	return &mixSource{gen: newGenerator(c.Seed, name, c.Mix, c.Batch, c.LargeMin, c.LargeMax), doc: i % c.Projects}
}

// pacer spaces a client's pushes to reach Rate pushes per second over all
// clients: each client's k-th push starts no earlier than start + k ×
// Clients / Rate. Without a rate it never waits (a closed loop).
type pacer struct {
	start    time.Time
	interval time.Duration
	k        int
}

func (c *Config) newPacer(start time.Time) *pacer {
	p := &pacer{start: start}
	if c.Rate > 0 {
		p.interval = time.Duration(float64(c.Clients) / c.Rate * float64(time.Second))
	}
	return p
}

// wait returns how long to sleep before the next push.
func (p *pacer) wait(now time.Time) time.Duration {
	if p.interval == 0 {
		return 0
	}
	at := p.start.Add(time.Duration(p.k) * p.interval)
	p.k++
	return at.Sub(now)
}

// brokerPID finds the process listening on the port of a broker on this
// machine, for its CPU time; 0 when none is found (a remote broker, or one
// in a container whose processes this user cannot see).
func brokerPID(brokers []string) int {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	for _, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			continue
		}
		pn, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		inodes := listeningSockets(pn)
		if len(inodes) == 0 {
			continue
		}
		procs, err := fs.AllProcs()
		if err != nil {
			return 0
		}
		for _, p := range procs {
			targets, err := p.FileDescriptorTargets()
			if err != nil {
				continue
			}
			for _, t := range targets {
				if strings.HasPrefix(t, "socket:") && inodes[t] {
					// A container's port is forwarded by a proxy whose CPU
					// is not the broker's.
					if comm, err := p.Comm(); err == nil && strings.Contains(comm, "proxy") {
						return 0
					}
					return p.PID
				}
			}
		}
	}
	return 0
}

// listeningSockets returns the inodes ("socket:[N]", as /proc/PID/fd
// links name them) of the TCP sockets listening on port, from
// /proc/net/tcp and tcp6: "sl local_address rem_address st … inode", the
// address as HEXIP:HEXPORT, state 0A is LISTEN.
func listeningSockets(port uint64) map[string]bool {
	inodes := map[string]bool{}
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || p != port {
				continue
			}
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	return inodes
}

// cpuOf is the CPU time (user + system) of process pid so far; 0 for pid 0.
func cpuOf(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}
