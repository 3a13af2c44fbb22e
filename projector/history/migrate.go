package history

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one schema migration embedded in the binary:
// migrations/NNNN_name.sql. Its statements are separated by ";" at the end
// of a line and written with {db} for the database; each one must be
// idempotent (CREATE … IF NOT EXISTS), since a migration interrupted
// half-way is applied again from its first statement.
type Migration struct {
	Version    uint32
	Name       string
	Statements []string
	// Checksum is the SHA-256 of the file; a recorded migration whose file
	// changed is reported, not applied again.
	Checksum string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s: name it NNNN_name.sql", e.Name())
		}
		v, _ := strconv.ParseUint(m[1], 10, 32)
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: uint32(v), Name: m[2], Statements: splitStatements(string(b)),
			Checksum: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version) - int(b.Version) })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %04d", out[i].Version)
		}
	}
	return out, nil
}

// splitStatements cuts a migration into statements at ";" ending a line,
// dropping "--" comment lines.
func splitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

var databaseName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidateDatabase checks a ClickHouse database name for the history
// tables.
func ValidateDatabase(db string) error {
	if !databaseName.MatchString(db) {
		return fmt.Errorf("ClickHouse database %q: use 1-64 letters, digits and _, starting with a letter or _", db)
	}
	return nil
}

// MigrationResult is what Migrate did with one migration.
type MigrationResult struct {
	Migration
	// Applied is true when this run applied it, false when it was
	// recorded already.
	Applied bool
	// Kept lists the key columns whose type change this server refused
	// (ClickHouse 18.16 alters no column of a sorting or partition key):
	// they keep their type.
	Kept []string
}

// migrationsTable records the applied migrations.
const migrationsTable = "schema_migrations"

// Migrate creates the database if missing and applies the embedded
// migrations not recorded in its schema_migrations table, in order,
// recording each one after all its statements succeeded. Running it again
// changes nothing; two processes running it at once are harmless, since
// every statement is idempotent.
func Migrate(ctx context.Context, conn driver.Conn, db string) ([]MigrationResult, error) {
	return migrate(ctx, nativeTarget{conn}, db)
}

// SQLSession is a ClickHouse that takes statements as text and answers
// rows as text, such as the current ClickHouse the tests embed with chdb.
type SQLSession interface {
	Exec(ctx context.Context, query string) error
	Query(ctx context.Context, query string) ([][]string, error)
}

// MigrateSession is Migrate on a SQLSession.
func MigrateSession(ctx context.Context, s SQLSession, db string) ([]MigrationResult, error) {
	return migrate(ctx, sessionTarget{s}, db)
}

// migrationTarget is what migrate needs of a ClickHouse: the native
// protocol of 18.16 inserts only through batches, a text session only
// through SQL.
type migrationTarget interface {
	exec(ctx context.Context, query string) error
	strings(ctx context.Context, query string) ([][]string, error)
	record(ctx context.Context, db string, m Migration) error
}

type nativeTarget struct{ conn driver.Conn }

func (t nativeTarget) exec(ctx context.Context, q string) error { return t.conn.Exec(ctx, q) }

func (t nativeTarget) strings(ctx context.Context, q string) ([][]string, error) {
	rs, err := t.conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out [][]string
	for rs.Next() {
		var a, b string
		if err := rs.Scan(&a, &b); err != nil {
			return nil, err
		}
		out = append(out, []string{a, b})
	}
	return out, rs.Err()
}

func (t nativeTarget) record(ctx context.Context, db string, m Migration) error {
	batch, err := t.conn.PrepareBatch(ctx, "INSERT INTO "+db+"."+migrationsTable+" (version, name, checksum, applied_at)")
	if err != nil {
		return err
	}
	if err := batch.Append(m.Version, m.Name, m.Checksum, time.Now().UTC()); err != nil {
		return err
	}
	return batch.Send()
}

type sessionTarget struct{ s SQLSession }

func (t sessionTarget) exec(ctx context.Context, q string) error { return t.s.Exec(ctx, q) }

func (t sessionTarget) strings(ctx context.Context, q string) ([][]string, error) {
	return t.s.Query(ctx, q)
}

func (t sessionTarget) record(ctx context.Context, db string, m Migration) error {
	// Name and checksum are [a-z0-9_] and hex: nothing to escape.
	return t.s.Exec(ctx, fmt.Sprintf("INSERT INTO %s.%s (version, name, checksum, applied_at) VALUES (%d, '%s', '%s', now())",
		db, migrationsTable, m.Version, m.Name, m.Checksum))
}

// addColumn matches the one ALTER form migrations use. ClickHouse 18.16
// has no ADD COLUMN IF NOT EXISTS, so migrate makes it idempotent itself:
// a column the table has already is not added again.
var addColumn = regexp.MustCompile(`^ALTER TABLE \{db\}\.([a-z_0-9]+) ADD COLUMN ([a-z_0-9]+) `)

// modifyColumn matches a type change; one of a key column is refused by
// ClickHouse 18.16 with "trying to ALTER key column" (Code 44) and kept.
var modifyColumn = regexp.MustCompile(`^ALTER TABLE \{db\}\.([a-z_0-9]+) MODIFY COLUMN ([a-z_0-9]+) `)

func migrate(ctx context.Context, t migrationTarget, db string) ([]MigrationResult, error) {
	if err := ValidateDatabase(db); err != nil {
		return nil, err
	}
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	if err := t.exec(ctx, "CREATE DATABASE IF NOT EXISTS "+db); err != nil {
		return nil, fmt.Errorf("create database %s: %w", db, err)
	}
	if err := t.exec(ctx, "CREATE TABLE IF NOT EXISTS "+db+"."+migrationsTable+
		" (version UInt32, name String, checksum String, applied_at DateTime)"+
		" ENGINE = ReplacingMergeTree() ORDER BY version"); err != nil {
		return nil, fmt.Errorf("create %s.%s: %w", db, migrationsTable, err)
	}
	applied, err := t.strings(ctx, "SELECT toString(version), any(checksum) FROM "+db+"."+migrationsTable+" GROUP BY version")
	if err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", db, migrationsTable, err)
	}
	sums := map[string]string{}
	for _, r := range applied {
		sums[r[0]] = r[1]
	}
	var out []MigrationResult
	for _, m := range ms {
		if sum, ok := sums[strconv.FormatUint(uint64(m.Version), 10)]; ok {
			if sum != m.Checksum {
				return out, fmt.Errorf("migration %04d_%s was applied to %s with another content (checksum %.12s, the binary has %.12s): "+
					"migrations are never edited once released; add a new one", m.Version, m.Name, db, sum, m.Checksum)
			}
			out = append(out, MigrationResult{Migration: m})
			continue
		}
		var kept []string
		for i, st := range m.Statements {
			if a := addColumn.FindStringSubmatch(st); a != nil {
				has, err := t.strings(ctx, "SELECT name, type FROM system.columns WHERE database = '"+db+
					"' AND table = '"+a[1]+"' AND name = '"+a[2]+"'")
				if err != nil {
					return out, fmt.Errorf("migration %04d_%s, statement %d: read the columns of %s.%s: %w", m.Version, m.Name, i+1, db, a[1], err)
				}
				if len(has) > 0 {
					continue
				}
			}
			if err := t.exec(ctx, strings.ReplaceAll(st, "{db}", db)); err != nil {
				if mc := modifyColumn.FindStringSubmatch(st); mc != nil && strings.Contains(err.Error(), "ALTER key column") {
					kept = append(kept, mc[1]+"."+mc[2])
					continue
				}
				return out, fmt.Errorf("migration %04d_%s, statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		if err := t.record(ctx, db, m); err != nil {
			return out, fmt.Errorf("record migration %04d: %w", m.Version, err)
		}
		out = append(out, MigrationResult{Migration: m, Applied: true, Kept: kept})
	}
	return out, nil
}
