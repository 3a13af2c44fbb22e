package loadgen

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Latencies are percentiles of a set of latencies.
type Latencies struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

func latencies(s []sample) Latencies {
	if len(s) == 0 {
		return Latencies{}
	}
	ls := make([]time.Duration, len(s))
	for i, x := range s {
		ls[i] = x.latency
	}
	slices.Sort(ls)
	q := func(p float64) time.Duration { return ls[min(len(ls)-1, int(p*float64(len(ls))))] }
	return Latencies{N: len(ls), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: ls[len(ls)-1]}
}

// Report is the result of a run.
type Report struct {
	Config  Config
	Started time.Time
	// TopicPrefix and Database name what the run created (and, without
	// Config.Keep, deleted).
	TopicPrefix, Database string
	Canon                 CanonResult
	Raw                   RawResult
}

// Throughput is Canon's decided mutations per second.
func (c CanonResult) Throughput() float64 { return perSecond(c.Mutations, c.Elapsed) }

// Throughput is the baseline's consumed records per second.
func (r RawResult) Throughput() float64 { return perSecond(r.Consumed, r.Elapsed) }

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// WriteMarkdown writes the report as a markdown section with its tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	c, raw, cfg := r.Canon, r.Raw, r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "## Canon load test, %s\n\n", r.Started.Format("2006-01-02 15:04 UTC"))
	rate := "as fast as answered"
	if cfg.Rate > 0 {
		rate = fmt.Sprintf("paced at %.0f pushes/s in all", cfg.Rate)
	}
	if cfg.Workload == WorkloadEdits {
		fmt.Fprintf(&b, "Edits workload: %d writers (package client, one item.patch of one field per push, waiting for applied, %s) over %d documents "+
			"with a websocket each, for %s; Canon's roles producer, sequencer, readapi; %d partitions; %d CPUs shared by the load generator, Canon and Kafka.\n\n",
			cfg.Clients, rate, cfg.Projects, c.Elapsed.Round(time.Second), cfg.Partitions, runtime.NumCPU())
	} else {
		fmt.Fprintf(&b, "%d clients (package client, batches of %d, each waiting for its outcomes, %s) over %d projects for %s; "+
			"mix %s; large items %d-%d KiB; %d partitions; %d CPUs shared by the load generator, Canon, Kafka and ClickHouse.\n\n",
			cfg.Clients, cfg.Batch, rate, cfg.Projects, c.Elapsed.Round(time.Second), cfg.Mix, cfg.LargeMin>>10, cfg.LargeMax>>10,
			cfg.Partitions, runtime.NumCPU())
	}
	if len(cfg.CanonArgs) > 0 {
		fmt.Fprintf(&b, "canon serve's extra flags: `%s`.\n\n", strings.Join(cfg.CanonArgs, " "))
	}
	b.WriteString("| | Canon: push → websocket | raw Kafka: produce → consume | Canon / raw |\n")
	b.WriteString("| --- | ---: | ---: | ---: |\n")
	fmt.Fprintf(&b, "| mutations | %d | %d | |\n", c.WebsocketMutations, raw.Consumed)
	fmt.Fprintf(&b, "| throughput (mutations/s) | %.0f | %.0f | %s |\n", c.Throughput(), raw.Throughput(), ratio(c.Throughput(), raw.Throughput()))
	for _, row := range []struct {
		name   string
		cv, rv time.Duration
	}{
		{"latency p50 (ms)", c.PushToWebsocket.P50, raw.Latency.P50},
		{"latency p99 (ms)", c.PushToWebsocket.P99, raw.Latency.P99},
		{"latency p99.9 (ms)", c.PushToWebsocket.P999, raw.Latency.P999},
		{"latency max (ms)", c.PushToWebsocket.Max, raw.Latency.Max},
	} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.name, ms(row.cv), ms(row.rv), ratio(float64(row.cv), float64(row.rv)))
	}
	b.WriteString("\n| Canon | |\n| --- | ---: |\n")
	fmt.Fprintf(&b, "| push → applied answer p50 / p99 / p99.9 (ms) | %s / %s / %s |\n", ms(c.PushToApplied.P50), ms(c.PushToApplied.P99), ms(c.PushToApplied.P999))
	if cfg.Workload == WorkloadMix {
		fmt.Fprintf(&b, "| ClickHouse visibility lag after the websocket p50 / p99 / p99.9 (ms, polled every %s) | %s / %s / %s |\n",
			cfg.PollInterval, ms(c.ClickHouseLag.P50), ms(c.ClickHouseLag.P99), ms(c.ClickHouseLag.P999))
	}
	per := func(v float64) float64 {
		if c.Mutations == 0 {
			return 0
		}
		return v / float64(c.Mutations)
	}
	fmt.Fprintf(&b, "| CPU per mutation (ms, canon process) | %.2f |\n", per(float64(c.CPU)/float64(time.Millisecond)))
	if c.BrokerCPU > 0 {
		fmt.Fprintf(&b, "| CPU per mutation (ms, the broker during Canon's run; during the baseline's) | %.2f; %.2f |\n",
			per(float64(c.BrokerCPU)/float64(time.Millisecond)), float64(raw.BrokerCPU)/float64(time.Millisecond)/float64(max(1, raw.Consumed)))
	}
	if c.ClickHouseCPU > 0 {
		fmt.Fprintf(&b, "| CPU per mutation (ms, the ClickHouse server during Canon's run) | %.2f |\n", per(float64(c.ClickHouseCPU)/float64(time.Millisecond)))
	}
	fmt.Fprintf(&b, "| CPU per mutation (ms, the load generator itself during Canon's run; during the baseline's) | %.2f; %.2f |\n",
		per(float64(c.LoadCPU)/float64(time.Millisecond)), float64(raw.LoadCPU)/float64(time.Millisecond)/float64(max(1, raw.Consumed)))
	if e := c.ClickHouseEvents; e != nil {
		fmt.Fprintf(&b, "| ClickHouse per mutation: rows and KB inserted; KB written (compressed); KB merged | %.1f, %.1f; %.1f; %.1f |\n",
			per(float64(e["InsertedRows"])), per(float64(e["InsertedBytes"]))/1000, per(float64(e["MergeTreeDataWriterCompressedBytes"]))/1000,
			per(float64(e["MergedUncompressedBytes"]))/1000)
		fmt.Fprintf(&b, "| ClickHouse INSERTs; parts written (of them already sorted); SELECTs | %d; %d (%d); %d |\n",
			e["InsertQuery"], e["MergeTreeDataWriterBlocks"], e["MergeTreeDataWriterBlocksAlreadySorted"], e["SelectQuery"])
	}
	if c.Transactions > 0 {
		fmt.Fprintf(&b, "| sequencer transactions; mutations per transaction; mean transaction (ms) | %d; %.2f; %s |\n",
			c.Transactions, float64(c.Mutations)/float64(c.Transactions), ms(c.TransactionTime/time.Duration(c.Transactions)))
	}
	if len(c.Requests) > 0 {
		fmt.Fprintf(&b, "| Kafka requests per mutation, by canon's client | %s |\n", requestsPer(c.Requests, c.Mutations))
	}
	if len(c.RequestBytes) > 0 {
		fmt.Fprintf(&b, "| Kafka KB per mutation sent to / received from the brokers, by canon's client and request | %s |\n", bytesPer(c.RequestBytes, c.Mutations))
	}
	if len(raw.RequestBytes) > 0 {
		fmt.Fprintf(&b, "| Kafka KB per record sent to / received from the brokers, the raw baseline's clients | %s |\n", bytesPer(raw.RequestBytes, raw.Consumed))
	}
	fmt.Fprintf(&b, "| Go heap allocated per mutation (KiB) | %.1f |\n", per(c.Allocated)/1024)
	fmt.Fprintf(&b, "| peak RSS (MiB) | %.0f |\n", float64(c.PeakRSS)/(1<<20))
	fmt.Fprintf(&b, "| args per mutation (bytes, mean) | %.0f |\n", per(float64(c.ArgsBytes)))
	fmt.Fprintf(&b, "| pushes; outcomes applied / error / duplicate | %d; %d / %d / %d |\n", c.Pushes, c.Applied, c.Errors, c.Duplicates)
	if cfg.Workload == WorkloadMix {
		fmt.Fprintf(&b, "| versions on websockets / in ClickHouse; mutations in ClickHouse (applied) | %d / %d; %d (%d) |\n",
			c.WebsocketVersions, c.ClickHouseVersions, c.ClickHouseMutations, c.ClickHouseApplied)
	} else {
		fmt.Fprintf(&b, "| versions on websockets | %d |\n", c.WebsocketVersions)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is the figures of one run that a comparison of runs takes the
// medians of.
type Summary struct {
	// Throughput is Canon's mutations/s, Raw the baseline's records/s,
	// Ratio Canon's over the baseline's.
	Throughput, Raw, Ratio float64
	// CPU per mutation in µs: Canon's process, the broker during Canon's
	// run, both, and the broker during the baseline (per record).
	CanonCPU, BrokerCPU, TotalCPU, RawBrokerCPU float64
	// ClickHouseCPU is the local ClickHouse server's CPU per mutation in
	// µs during Canon's run (0 when not measured); not in TotalCPU.
	ClickHouseCPU float64
	// LoadCPU is the load generator's own CPU per mutation in µs during
	// Canon's run; not in TotalCPU.
	LoadCPU float64
	// ClickHouseInserted and ClickHouseMerged are the KB (1,000 bytes,
	// uncompressed) the ClickHouse server inserted and merged per
	// mutation during Canon's run (0 when not measured).
	ClickHouseInserted, ClickHouseMerged float64
	// Push → websocket p50 and p99 in ms, and the baseline's produce →
	// consume p50.
	P50, P99, RawP50 float64
	// PerTransaction is the mutations per sequencer transaction.
	PerTransaction float64
	// BrokerIn and BrokerOut are the KB per mutation that canon's clients
	// sent to the brokers and received from them; RawIn and RawOut the
	// baseline's per record (0 when not measured).
	BrokerIn, BrokerOut, RawIn, RawOut float64
}

// Summary returns the run's figures.
func (r *Report) Summary() Summary {
	c, raw := r.Canon, r.Raw
	us := func(d time.Duration, n int) float64 {
		if n == 0 {
			return 0
		}
		return float64(d) / float64(time.Microsecond) / float64(n)
	}
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	s := Summary{
		Throughput: c.Throughput(), Raw: raw.Throughput(),
		CanonCPU: us(c.CPU, c.Mutations), BrokerCPU: us(c.BrokerCPU, c.Mutations), TotalCPU: us(c.CPU+c.BrokerCPU, c.Mutations),
		RawBrokerCPU: us(raw.BrokerCPU, raw.Consumed), ClickHouseCPU: us(c.ClickHouseCPU, c.Mutations), LoadCPU: us(c.LoadCPU, c.Mutations),
		P50: msf(c.PushToWebsocket.P50), P99: msf(c.PushToWebsocket.P99), RawP50: msf(raw.Latency.P50),
	}
	if e := c.ClickHouseEvents; e != nil && c.Mutations > 0 {
		s.ClickHouseInserted = float64(e["InsertedBytes"]) / 1000 / float64(c.Mutations)
		s.ClickHouseMerged = float64(e["MergedUncompressedBytes"]) / 1000 / float64(c.Mutations)
	}
	if s.Raw > 0 {
		s.Ratio = s.Throughput / s.Raw
	}
	if c.Transactions > 0 {
		s.PerTransaction = float64(c.Mutations) / float64(c.Transactions)
	}
	kb := func(bytes map[string]float64, n int) (in, out float64) {
		if n == 0 {
			return 0, 0
		}
		w, r := byDirection(bytes)
		return w / 1000 / float64(n), r / 1000 / float64(n)
	}
	s.BrokerIn, s.BrokerOut = kb(c.RequestBytes, c.Mutations)
	s.RawIn, s.RawOut = kb(raw.RequestBytes, raw.Consumed)
	return s
}

// byDirection sums bytes by "client request direction" into those
// written to the brokers and those read from them.
func byDirection(bytes map[string]float64) (written, read float64) {
	for k, v := range bytes {
		switch {
		case strings.HasSuffix(k, " write"):
			written += v
		case strings.HasSuffix(k, " read"):
			read += v
		}
	}
	return written, read
}

// bytesPer lists the KB per mutation written / read by client and
// request kind, the largest first, those under 0.01 KB both ways left
// out, with the totals.
func bytesPer(bytes map[string]float64, n int) string {
	if n == 0 {
		return ""
	}
	type wr struct{ w, r float64 }
	by := map[string]*wr{}
	for k, v := range bytes {
		name, dir := k, ""
		if i := strings.LastIndexByte(k, ' '); i >= 0 {
			name, dir = k[:i], k[i+1:]
		}
		e := by[name]
		if e == nil {
			e = &wr{}
			by[name] = e
		}
		v = v / 1000 / float64(n)
		if dir == "write" {
			e.w += v
		} else {
			e.r += v
		}
	}
	names := make([]string, 0, len(by))
	for name, e := range by {
		if e.w >= 0.01 || e.r >= 0.01 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if x, y := by[a].w+by[a].r, by[b].w+by[b].r; x != y {
			return cmp.Compare(y, x)
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(names)+1)
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f / %.2f", name, by[name].w, by[name].r))
	}
	w, r := byDirection(bytes)
	parts = append(parts, fmt.Sprintf("total %.2f / %.2f", w/1000/float64(n), r/1000/float64(n)))
	return strings.Join(parts, "; ")
}

// percentileSeries returns the p50 and p99 of each window of time: a
// second, or less for a short run, so that a plot has some 60 points.
func percentileSeries(s []sample) (p50, p99 plotter.XYs) {
	var span time.Duration
	for _, x := range s {
		span = max(span, x.at)
	}
	win := min(max(span/60, 100*time.Millisecond), time.Second)
	byWindow := map[int][]time.Duration{}
	for _, x := range s {
		sec := int(x.at / win)
		byWindow[sec] = append(byWindow[sec], x.latency)
	}
	secs := make([]int, 0, len(byWindow))
	for sec := range byWindow {
		secs = append(secs, sec)
	}
	slices.Sort(secs)
	for _, sec := range secs {
		ls := byWindow[sec]
		slices.Sort(ls)
		q := func(p float64) float64 {
			return max(float64(ls[min(len(ls)-1, int(p*float64(len(ls))))])/float64(time.Millisecond), 0.01)
		}
		x := (float64(sec) + 0.5) * win.Seconds()
		p50 = append(p50, plotter.XY{X: x, Y: q(0.50)})
		p99 = append(p99, plotter.XY{X: x, Y: q(0.99)})
	}
	return p50, p99
}

// SavePlot writes a plot of latency over time (p50 and p99 of each
// window, Canon and the raw baseline) to path; the extension picks the
// format (.png, .svg, .pdf).
func (r *Report) SavePlot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Canon push → websocket vs raw Kafka produce → consume (%d clients, %d projects)", r.Config.Clients, r.Config.Projects)
	p.X.Label.Text = "seconds since the phase began"
	p.Y.Label.Text = "latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	add := func(xys plotter.XYs, label string, c color.Color, dashed bool) error {
		if len(xys) == 0 {
			return nil
		}
		l, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", label, err)
		}
		points.Color = c
		points.Radius = vg.Points(1.5)
		l.Color = c
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l, points)
		p.Legend.Add(label, l)
		return nil
	}
	blue := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange := color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	c50, c99 := percentileSeries(r.Canon.samples)
	r50, r99 := percentileSeries(r.Raw.samples)
	for _, s := range []struct {
		xys    plotter.XYs
		label  string
		c      color.Color
		dashed bool
	}{
		{c50, "Canon p50", blue, false},
		{c99, "Canon p99", blue, true},
		{r50, "raw Kafka p50", orange, false},
		{r99, "raw Kafka p99", orange, true},
	} {
		if err := add(s.xys, s.label, s.c, s.dashed); err != nil {
			return err
		}
	}
	p.Legend.Left = true
	p.Y.Max *= 4 // room for the legend above the lines
	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("save the plot: %w", err)
	}
	return nil
}

// requestsPer lists the requests per mutation by client and kind, the
// most frequent first, those under 0.01 per mutation left out, with the
// total.
func requestsPer(reqs map[string]float64, mutations int) string {
	if mutations == 0 {
		return ""
	}
	type kv struct {
		k string
		v float64
	}
	var all []kv
	total := 0.0
	for k, n := range reqs {
		v := n / float64(mutations)
		total += v
		if v >= 0.01 {
			all = append(all, kv{k, v})
		}
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.v != b.v {
			return cmp.Compare(b.v, a.v)
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, 0, len(all)+1)
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, e.v))
	}
	parts = append(parts, fmt.Sprintf("total %.2f", total))
	return strings.Join(parts, "; ")
}
