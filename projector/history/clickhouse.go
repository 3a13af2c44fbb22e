package history

// The ClickHouse side of the projector: connections, the batched inserts
// and the one lookup the projector needs (a version's scalars). Every
// insert goes through PrepareBatch with an explicit column list, the only
// form ClickHouse 18.16 answers over the native protocol.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"golang.org/x/sync/errgroup"
)

// DefaultDatabase is the database of the history tables.
const DefaultDatabase = "canon"

// ClickHouseConfig says where the history tables are.
type ClickHouseConfig struct {
	// Addr are host:port addresses of the native protocol (port 9000 by
	// default on a ClickHouse server), not the HTTP port.
	Addr []string
	// Database holds the tables (default "canon"); Migrate creates it.
	Database string
	// Username and Password authenticate ("default" and no password when
	// empty).
	Username, Password string
	// TLS, when set, encrypts the connection (ClickHouse's secure native
	// port, 9440 by default), with a client certificate when it has one.
	TLS *tls.Config
	// DialTimeout bounds connecting (default 10s); ReadTimeout bounds one
	// statement (default 2 minutes).
	DialTimeout, ReadTimeout time.Duration
}

func (c *ClickHouseConfig) defaults() {
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Username == "" {
		c.Username = "default"
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 2 * time.Minute
	}
}

// Validate reports a missing address or a bad database name.
func (c ClickHouseConfig) Validate() error {
	if len(c.Addr) == 0 {
		return errors.New("no ClickHouse address: pass --clickhouse host:port (the native protocol port, 9000 by default)")
	}
	for _, a := range c.Addr {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") || strings.Contains(a, "/") {
			return fmt.Errorf("ClickHouse address %q is not host:port of the native protocol (e.g. localhost:9000)", a)
		}
	}
	if c.Database != "" {
		return ValidateDatabase(c.Database)
	}
	return nil
}

// maxConns bounds the connections of a projector: its batch is seven
// concurrent inserts, and a lookup may run beside them.
const maxConns = 8

// idleConns is how many connections the pool keeps between batches: all
// of them, so that each batch does not dial again and regrow the buffers
// of new connections (a variable for BenchmarkInsertBatch).
var idleConns = maxConns

// Open connects to ClickHouse. The connection's default database is
// "default", so that it works before Migrate created Database; every
// statement names its database.
func (c ClickHouseConfig) Open(ctx context.Context) (driver.Conn, error) {
	c.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         c.Addr,
		Auth:         clickhouse.Auth{Database: "default", Username: c.Username, Password: c.Password},
		TLS:          c.TLS,
		DialTimeout:  c.DialTimeout,
		ReadTimeout:  c.ReadTimeout,
		MaxOpenConns: maxConns,
		MaxIdleConns: idleConns,
	})
	if err != nil {
		return nil, fmt.Errorf("ClickHouse %v: %w", c.Addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		conn.Close()
		return nil, c.openError(err)
	}
	return conn, nil
}

// clientCertHint is what to check when a secure port refuses the client.
const clientCertHint = "it may require a client certificate, --clickhouse-tls-cert and --clickhouse-tls-key, signed by a CA it trusts"

// openError says what to fix when the first ping fails: the CA, the
// port or the credentials.
func (c ClickHouseConfig) openError(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		invalid   x509.CertificateInvalidError
		alert     tls.AlertError
		notTLS    tls.RecordHeaderError
		ex        *proto.Exception
	)
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("ClickHouse %v presents a certificate that no trusted CA signed (%w): pass its CA with --clickhouse-tls-ca", c.Addr, err)
	case errors.As(err, &badHost):
		return fmt.Errorf("ClickHouse %v presents a certificate for other host names (%w): connect by a name it has in --clickhouse", c.Addr, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("ClickHouse %v presents a certificate that is not valid (%w): check its dates and usage", c.Addr, err)
	case c.TLS != nil && (errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls")):
		return fmt.Errorf("ClickHouse %v refused the TLS handshake (%w): %s", c.Addr, err, clientCertHint)
	case c.TLS != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)):
		// With TLS 1.3 the server checks the client's certificate after
		// the client's handshake is done: its refusal may reach the
		// client as a reset connection rather than as the alert.
		return fmt.Errorf("ClickHouse %v closed the connection after the TLS handshake (%w): %s", c.Addr, err, clientCertHint)
	case c.TLS != nil && errors.As(err, &notTLS):
		return fmt.Errorf("ClickHouse %v does not answer TLS (%w): give its secure native port in --clickhouse (tcp_port_secure, 9440 by default), or drop --clickhouse-tls", c.Addr, err)
	case errors.As(err, &ex) && isAuthFailure(ex.Code):
		return fmt.Errorf("ClickHouse %v refused user %q (%w): check --clickhouse-user and the password (--clickhouse-password-file or CANON_CLICKHOUSE_PASSWORD)", c.Addr, c.Username, err)
	}
	return fmt.Errorf("ClickHouse %v does not answer (%w): check --clickhouse (native protocol host:port) and the credentials", c.Addr, err)
}

// isAuthFailure reports the server's codes for a refused login: unknown
// user (192), wrong password (193), no access from this address (195),
// and the single code current releases use instead (516).
func isAuthFailure(code int32) bool {
	switch code {
	case 192, 193, 195, 516:
		return true
	}
	return false
}

// writer inserts batches into the history tables of one database.
type writer struct {
	conn driver.Conn
	db   string
	// blockBytes bounds a block's string bytes (0: maxBlockBytes).
	blockBytes int
	// unsorted sends the rows in the batch's order instead of the
	// table's key order (the baseline of BenchmarkInsertSorted).
	unsorted bool
}

// maxBlockBytes bounds the string bytes of one native block of an
// insert. An insert is one statement in blocks of at most this many bytes
// (a row larger than it is a block alone): the driver's string column
// grows row by row and keeps its capacity from one block to the next, so
// a batch of many large bodies costs a buffer of about one block instead
// of one grown, copied and regrown to the whole batch. The server gathers
// the blocks of one INSERT into its parts (min_insert_block_size_bytes),
// so the tables get no more parts.
const maxBlockBytes = 1 << 20

// insert sends one table's columns as one statement, in native blocks of
// at most maxBlockBytes of strings.
func (w *writer) insert(ctx context.Context, t table, cols []any) error {
	n := columnLen(cols[0])
	if n == 0 {
		return nil
	}
	if order := w.order(n, t.keyColumns(cols)); order != nil {
		sorted := make([]any, len(cols))
		for i, c := range cols {
			sorted[i] = gather(c, order)
		}
		cols = sorted
	}
	batch, err := w.conn.PrepareBatch(ctx, "INSERT INTO "+w.db+"."+t.name+" ("+strings.Join(t.columns, ", ")+")")
	if err != nil {
		return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
	}
	for start := 0; start < n; {
		end := blockEnd(cols, start, n, cmp.Or(w.blockBytes, maxBlockBytes))
		for i, c := range cols {
			if err := batch.Column(i).Append(rowRange(c, start, end)); err != nil {
				_ = batch.Abort()
				return fmt.Errorf("insert into %s.%s, column %s: %w", w.db, t.name, t.columns[i], err)
			}
		}
		if end < n {
			if err := batch.Flush(); err != nil {
				_ = batch.Abort()
				return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
			}
		}
		start = end
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
	}
	return nil
}

// blockEnd is the end of the block of rows that starts at start: the rows
// whose strings sum to at most limit bytes, and at least one row.
func blockEnd(cols []any, start, n, limit int) int {
	size := 0
	for r := start; r < n; r++ {
		row := 0
		for _, c := range cols {
			if s, ok := c.([]string); ok {
				row += len(s[r])
			}
		}
		if r > start && size+row > limit {
			return r
		}
		size += row
	}
	return n
}

// rowRange is rows [start, end) of a column.
func rowRange(c any, start, end int) any {
	switch s := c.(type) {
	case []string:
		return s[start:end]
	case []uint64:
		return s[start:end]
	case []uint32:
		return s[start:end]
	case []int64:
		return s[start:end]
	case []int32:
		return s[start:end]
	case []time.Time:
		return s[start:end]
	default:
		panic(fmt.Sprintf("history: column of type %T", c))
	}
}

// insertBlobs sends the rows of bodies or chunks as one statement, in
// blocks of at most maxBlockBytes of bytes, row by row: each row's parts
// are joined into a buffer that is reused from row to row, from which the
// driver copies them into its column.
func (w *writer) insertBlobs(ctx context.Context, t table, r *blobRows) error {
	if len(r.org) == 0 {
		return nil
	}
	batch, err := w.conn.PrepareBatch(ctx, "INSERT INTO "+w.db+"."+t.name+" ("+strings.Join(t.columns, ", ")+")")
	if err != nil {
		return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
	}
	limit := cmp.Or(w.blockBytes, maxBlockBytes)
	var buf []byte
	block := 0
	order := w.order(len(r.org), []any{r.org, r.project, r.hash}) // the key of bodies and chunks
	for j := range r.org {
		i := j
		if order != nil {
			i = order[j]
		}
		if block > 0 && block+int(r.size[i]) > limit {
			if err := batch.Flush(); err != nil {
				_ = batch.Abort()
				return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
			}
			block = 0
		}
		buf = buf[:0]
		for _, p := range r.data[i] {
			buf = append(buf, p...)
		}
		if err := batch.Append(r.org[i], r.project[i], r.hash[i], r.size[i], buf, r.kafkaOffset[i]); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
		}
		block += len(buf)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert into %s.%s: %w", w.db, t.name, err)
	}
	return nil
}

// keyColumns are the columns of t's sorting key, in its order.
func (t table) keyColumns(cols []any) []any {
	key := make([]any, len(t.key))
	for k, name := range t.key {
		i := slices.Index(t.columns, name)
		if i < 0 {
			panic("history: key column " + name + " is not a column of " + t.name)
		}
		key[k] = cols[i]
	}
	return key
}

// keyOrder is the order of n rows by the key columns, stable (rows of
// equal keys keep their order, as the server keeps them), or nil when the
// rows are in it already. An insert whose rows come in the order of the
// table's sorting key is written as it is: the server sorts only a block
// that is not sorted (MergeTreeDataWriterBlocksAlreadySorted, in 18.16 as
// in current releases), and sorting one means copying every column of
// it, the bodies and args too. Strings compare as bytes, as ClickHouse
// compares them.
func keyOrder(n int, key []any) []int {
	less := func(a, b int) int {
		for _, c := range key {
			var d int
			switch s := c.(type) {
			case []string:
				d = strings.Compare(s[a], s[b])
			case []uint64:
				d = cmp.Compare(s[a], s[b])
			case []uint32:
				d = cmp.Compare(s[a], s[b])
			default:
				panic(fmt.Sprintf("history: key column of type %T", c))
			}
			if d != 0 {
				return d
			}
		}
		return 0
	}
	sorted := true
	for r := 1; r < n && sorted; r++ {
		sorted = less(r-1, r) <= 0
	}
	if sorted {
		return nil
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, less)
	return order
}

// order is keyOrder, or nil when w sends rows unsorted.
func (w *writer) order(n int, key []any) []int {
	if w.unsorted {
		return nil
	}
	return keyOrder(n, key)
}

// gather is a column's rows in the given order.
func gather(c any, order []int) any {
	switch s := c.(type) {
	case []string:
		return gatherOf(s, order)
	case []uint64:
		return gatherOf(s, order)
	case []uint32:
		return gatherOf(s, order)
	case []int64:
		return gatherOf(s, order)
	case []int32:
		return gatherOf(s, order)
	case []time.Time:
		return gatherOf(s, order)
	default:
		panic(fmt.Sprintf("history: column of type %T", c))
	}
}

func gatherOf[T any](s []T, order []int) []T {
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = s[j]
	}
	return out
}

func columnLen(c any) int {
	switch s := c.(type) {
	case []string:
		return len(s)
	default:
		panic(fmt.Sprintf("history: first column of type %T", c))
	}
}

// insertAll inserts a batch into the tables, concurrently. A failure
// leaves some tables with the batch and some without: the caller retries
// the whole batch, and the tables' keys collapse what arrived twice.
func (w *writer) insertAll(ctx context.Context, b *rows) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.insert(gctx, versionsTable, b.versions.columns()) })
	g.Go(func() error { return w.insert(gctx, mutationsTable, b.mutations.columns()) })
	g.Go(func() error { return w.insert(gctx, itemsTable, b.items.columns()) })
	g.Go(func() error { return w.insert(gctx, scalarsTable, b.scalars.columns()) })
	g.Go(func() error { return w.insertBlobs(gctx, bodiesTable, &b.bodies) })
	g.Go(func() error { return w.insertBlobs(gctx, chunksTable, &b.chunks) })
	g.Go(func() error { return w.insert(gctx, branchesTable, b.branches.columns()) })
	return g.Wait()
}

// chunksIn reads chunks of a project by hash from the chunks table;
// hashes are hex, checked by the decoder. A chunk whose bytes do not hash
// to its hash is left out, as if the table did not have it.
func (w *writer) chunksIn(ctx context.Context, org, project string, hashes []string) (map[string][]byte, error) {
	var in strings.Builder
	for i, h := range hashes {
		if !isHex(h) {
			return nil, fmt.Errorf("chunk hash %q is not hex", h)
		}
		if i > 0 {
			in.WriteByte(',')
		}
		in.WriteString("'" + h + "'")
	}
	rs, err := w.conn.Query(ctx, "SELECT hash, any(data) FROM "+w.db+".chunks WHERE org = ? AND project = ? AND hash IN ("+in.String()+") GROUP BY hash",
		org, project)
	if err != nil {
		return nil, fmt.Errorf("read %d chunks of %s/%s: %w", len(hashes), org, project, err)
	}
	defer rs.Close()
	out := map[string][]byte{}
	for rs.Next() {
		var h, data string
		if err := rs.Scan(&h, &data); err != nil {
			return nil, err
		}
		// Only bytes that are the chunk: the body check resumes after
		// the chunks a body shares with one checked before, by hash.
		if sum := sha256.Sum256([]byte(data)); hex.EncodeToString(sum[:]) != h {
			continue
		}
		out[h] = []byte(data)
	}
	return out, rs.Err()
}

// ancestorsOf reads a branch's ancestry from the branches table; none
// when the table does not have it.
func (w *writer) ancestorsOf(ctx context.Context, org, project, branch string) ([]ancestor, error) {
	rs, err := w.conn.Query(ctx, "SELECT ancestor, depth, upto FROM "+w.db+".branches FINAL WHERE org = ? AND project = ? AND branch = ? ORDER BY depth",
		org, project, branch)
	if err != nil {
		return nil, fmt.Errorf("read the ancestry of %s/%s@%s: %w", org, project, branch, err)
	}
	defer rs.Close()
	var out []ancestor
	for rs.Next() {
		var a ancestor
		if err := rs.Scan(&a.branch, &a.depth, &a.upto); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rs.Err()
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// scalarsAt reads the scalars of a version from the versions table; ok is
// false when the table does not have it.
func (w *writer) scalarsAt(ctx context.Context, org, project, branch string, version uint64) (scalarSet, bool, error) {
	rs, err := w.conn.Query(ctx, "SELECT scalars FROM "+w.db+".versions WHERE org = ? AND project = ? AND branch = ? AND version = ? LIMIT 1",
		org, project, branch, version)
	if err != nil {
		return nil, false, fmt.Errorf("read scalars of %s/%s@%s version %d: %w", org, project, branch, version, err)
	}
	defer rs.Close()
	if !rs.Next() {
		return nil, false, rs.Err()
	}
	var s string
	if err := rs.Scan(&s); err != nil {
		return nil, false, err
	}
	set, err := parseScalarSet(s)
	if err != nil {
		return nil, false, fmt.Errorf("scalars of %s/%s@%s version %d in ClickHouse: %w", org, project, branch, version, err)
	}
	return set, true, nil
}
