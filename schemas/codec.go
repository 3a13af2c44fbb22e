package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Record kinds: the part of a canon-schema header before the major
// version.
const (
	KindMutation = "mutation"
	KindVersion  = "version"
	KindChunk    = "chunk"
	KindRejected = "rejected"
)

// Errors of the codecs. A decode error is one of these, or a *FieldError
// that names the wrong field (reject reason invalid); RejectReason picks
// the reason code.
var (
	// ErrUnknownSchema means the canon-schema header is missing or
	// malformed, names a kind this build does not know, a major version it
	// cannot read (the record was written by a newer Canon: upgrade the
	// reader) or the wrong kind for the decoder called.
	ErrUnknownSchema = errors.New("unknown schema")
	// ErrNewerSchema, which comes with ErrUnknownSchema, means the
	// header names a known kind in a major version newer than this
	// build reads: a newer Canon wrote the record, and a reader that
	// must not skip it has to be upgraded. Other unknown schemas
	// (no header, a malformed one, an unknown kind) were not written by
	// Canon at all.
	ErrNewerSchema = errors.New("written by a newer Canon")
	// ErrUndecodable means the value is not JSON, or not a JSON object.
	ErrUndecodable = errors.New("undecodable")
	// ErrTooLarge means a record or one of its fields is over a limit of
	// Limits; the error says which field, the size and the limit.
	ErrTooLarge = errors.New("too large")
)

// RejectReason returns the reason code of a rejected/v1 record for an
// error of a decoder: unknown_schema, too_large, undecodable, or invalid.
func RejectReason(err error) string {
	switch {
	case errors.Is(err, ErrUnknownSchema):
		return ReasonUnknownSchema
	case errors.Is(err, ErrTooLarge):
		return ReasonTooLarge
	case errors.Is(err, ErrUndecodable):
		return ReasonUndecodable
	}
	return ReasonInvalid
}

// readable lists the majors of each kind this build reads.
func readable(kind string) (majors []int, ok bool) {
	switch kind {
	case KindMutation, KindVersion, KindChunk, KindRejected, KindDeploy:
		return []int{1}, true
	}
	return nil, false
}

const knownKinds = "mutation, version, chunk, rejected, deploy"

// ParseSchema parses a canon-schema header value, "<kind>/v<major>" such
// as "mutation/v1", and checks that this build reads it. On an unknown
// kind or major, kind and major are still returned with the error
// (ErrUnknownSchema) for the caller's logs.
func ParseSchema(header string) (kind string, major int, err error) {
	switch header { // the fast path of every record
	case SchemaMutationV1:
		return KindMutation, 1, nil
	case SchemaVersionV1:
		return KindVersion, 1, nil
	case SchemaChunkV1:
		return KindChunk, 1, nil
	case SchemaRejectedV1:
		return KindRejected, 1, nil
	case SchemaDeployV1:
		return KindDeploy, 1, nil
	}
	if header == "" {
		return "", 0, fmt.Errorf("%w: the record has no %s header: its producer must set it to the record's kind and major version, e.g. %q",
			ErrUnknownSchema, HeaderSchema, SchemaMutationV1)
	}
	kind, ver, found := strings.Cut(header, "/")
	if !found || !validKind(kind) || !validMajor(ver) {
		return "", 0, fmt.Errorf("%w: %s header %q is malformed: want <kind>/v<major> with a lower-case kind and a major from 1 without leading zeros, e.g. %q",
			ErrUnknownSchema, HeaderSchema, preview([]byte(header)), SchemaMutationV1)
	}
	major, _ = strconv.Atoi(ver[1:])
	majors, ok := readable(kind)
	if !ok {
		return kind, major, fmt.Errorf("%w: %s header %q: unknown kind %q: this build reads %s",
			ErrUnknownSchema, HeaderSchema, header, kind, knownKinds)
	}
	for _, m := range majors {
		if m == major {
			return kind, major, nil
		}
	}
	var names []string
	for _, m := range majors {
		names = append(names, kind+"/v"+strconv.Itoa(m))
	}
	if major > slices.Max(majors) {
		return kind, major, fmt.Errorf("%w: %s header %q: this build reads %s only: the record was %w; upgrade this reader",
			ErrUnknownSchema, HeaderSchema, header, strings.Join(names, ", "), ErrNewerSchema)
	}
	return kind, major, fmt.Errorf("%w: %s header %q: this build reads %s only",
		ErrUnknownSchema, HeaderSchema, header, strings.Join(names, ", "))
}

func validKind(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (i == 0 || c != '_' && (c < '0' || c > '9')) {
			return false
		}
	}
	return true
}

func validMajor(s string) bool {
	if len(s) < 2 || len(s) > 10 || s[0] != 'v' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// expectSchema checks that a header is one this build reads, of kind.
func expectSchema(header, kind string) error {
	k, _, err := ParseSchema(header)
	if err != nil {
		return err
	}
	if k != kind {
		return fmt.Errorf("%w: %s header %q is not a %s record: it is for the %s decoder", ErrUnknownSchema, HeaderSchema, header, kind, k)
	}
	return nil
}

// readObject reads value, which must be exactly one JSON object, with
// optional whitespace around it, in UTF-8 (RFC 8259: invalid UTF-8 would
// reach mutators as U+FFFD and make item bodies impossible to
// canonicalize), in one pass of walk, which binds its members as it
// checks them. The errors say what is wrong with a value that is not such
// an object.
func readObject(schema string, value []byte, walk func(d []byte, at, depth int) (int, bool)) error {
	if !utf8.Valid(value) {
		n := 0
		for n < len(value) {
			r, size := utf8.DecodeRune(value[n:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			n += size
		}
		return fmt.Errorf("%s: %w: the value is not valid UTF-8 (at byte %d): JSON text is UTF-8", schema, ErrUndecodable, n)
	}
	i := SkipJSONSpace(value, 0)
	if i < len(value) && value[i] == '{' {
		if end, ok := walk(value, i, 0); ok && SkipJSONSpace(value, end) == len(value) {
			return nil
		}
		// Not valid JSON: the walk takes every valid object.
	} else if ValidJSON(value) {
		return fmt.Errorf("%s: %w: the value must be a JSON object, got %s", schema, ErrUndecodable, got(bytes.TrimSpace(value)))
	}
	if len(bytes.TrimSpace(value)) == 0 {
		return fmt.Errorf("%s: %w: the value is empty: want a JSON object", schema, ErrUndecodable)
	}
	err := json.Unmarshal(value, new(json.RawMessage))
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w: the value is not valid JSON: %w (at byte %d)", schema, ErrUndecodable, se, se.Offset)
	}
	return fmt.Errorf("%s: %w: the value is not valid JSON: %w", schema, ErrUndecodable, err)
}

// marshal encodes v like json.Marshal, but leaves <, > and & as they are:
// what Canon writes is read by programs, not embedded in HTML.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

var jsonNull = json.RawMessage("null")

// EncodeMutation validates m and returns the value of its mutation/v1
// record. Nil Args are written as null. A zero field of l is taken from
// DefaultLimits.
func EncodeMutation(m *Mutation, l Limits) ([]byte, error) {
	return encodeMutation(m, l, false)
}

// EncodeCheckedMutation is EncodeMutation for a caller that has checked
// that m.Args, unless empty, is valid JSON without whitespace outside its
// strings, as the ingest does while it decodes a push: the args are
// copied as they are instead of being scanned again. Everything else is
// validated, and the value and the errors are those of EncodeMutation.
// Args that are not what the caller checked make a record that readers
// refuse as undecodable.
func EncodeCheckedMutation(m *Mutation, l Limits) ([]byte, error) {
	return encodeMutation(m, l, true)
}

func encodeMutation(m *Mutation, l Limits, argsChecked bool) ([]byte, error) {
	l = l.orDefaults()
	// The args' JSON is checked while it is written; a mutation that fails
	// either way is checked again in full, so that the error is the first
	// one in validateMutation's order.
	var b []byte
	err := validateMutation(m, l, top, false)
	if err == nil {
		size := 160 + len(m.Org) + len(m.Project) + len(m.Branch) + len(m.ClientGroup) + len(m.Client) + len(m.Name) + len(m.Args) + len(m.Principal)
		var ok bool
		if b, ok = appendMutation(make([]byte, 0, size), m, argsChecked); !ok {
			err = errors.New("the args are not JSON") // replaced below
		}
	}
	if err != nil {
		if verr := validateMutation(m, l, top, true); verr != nil {
			err = verr
		}
		return nil, fmt.Errorf("encode %s: %w", SchemaMutationV1, err)
	}
	if len(b) > l.MaxMutationBytes {
		return nil, fmt.Errorf("encode %s: %w: the value is %d bytes, over the limit of %d bytes (MaxMutationBytes): send smaller args",
			SchemaMutationV1, ErrTooLarge, len(b), l.MaxMutationBytes)
	}
	return b, nil
}

// DecodeMutation decodes and validates the value of a mutation record
// whose canon-schema header is schema. Members it does not know are
// ignored. A zero field of l is taken from DefaultLimits.
func DecodeMutation(schema string, value []byte, l Limits) (*Mutation, error) {
	if err := expectSchema(schema, KindMutation); err != nil {
		return nil, err
	}
	l = l.orDefaults()
	if len(value) > l.MaxMutationBytes {
		return nil, fmt.Errorf("%s: %w: the value is %d bytes, over the limit of %d bytes (MaxMutationBytes): send smaller args",
			schema, ErrTooLarge, len(value), l.MaxMutationBytes)
	}
	var members mutationMembers
	if err := readObject(schema, value, members.walk); err != nil {
		return nil, err
	}
	m := new(Mutation)
	if err := parseMutation(&members, top, m); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	if err := validateMutation(m, l, top, false); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	return m, nil
}

// EncodeVersion validates v and returns the value of its version/v1
// record. Nil Scalars, Items, Mutations and LastIDs are written as {} and
// [], never null; nil Args as null.
func EncodeVersion(v *Version, l Limits) ([]byte, error) {
	l = l.orDefaults()
	if err := validateVersion(v, l, true); err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaVersionV1, err)
	}
	w := *v
	if w.Scalars == nil {
		w.Scalars = map[string]json.RawMessage{}
	}
	if w.Items == nil {
		w.Items = []ItemChange{}
	}
	if w.LastIDs == nil {
		w.LastIDs = map[string]uint64{}
	}
	for i := range w.Mutations {
		if len(w.Mutations[i].Args) == 0 {
			w.Mutations = append([]Outcome(nil), w.Mutations...)
			for j := range w.Mutations {
				if len(w.Mutations[j].Args) == 0 {
					w.Mutations[j].Args = jsonNull
				}
			}
			break
		}
	}
	b, err := marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaVersionV1, err)
	}
	return b, nil
}

// DecodeVersion decodes and validates the value of a version record whose
// canon-schema header is schema. Members it does not know are ignored. A
// zero field of l is taken from DefaultLimits.
func DecodeVersion(schema string, value []byte, l Limits) (*Version, error) {
	if err := expectSchema(schema, KindVersion); err != nil {
		return nil, err
	}
	l = l.orDefaults()
	var members versionMembers
	if err := readObject(schema, value, members.walk); err != nil {
		return nil, err
	}
	v := new(Version)
	if err := parseVersion(&members, v); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	if err := validateVersion(v, l, false); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	return v, nil
}

// EncodeRejected validates r and returns the value of its rejected/v1
// record.
func EncodeRejected(r *Rejected, l Limits) ([]byte, error) {
	l = l.orDefaults()
	if err := validateRejected(r, l, true); err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaRejectedV1, err)
	}
	w := *r
	if w.Mutation != nil && len(w.Mutation.Args) == 0 {
		m := *w.Mutation
		m.Args = jsonNull
		w.Mutation = &m
	}
	b, err := marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaRejectedV1, err)
	}
	return b, nil
}

// DecodeRejected decodes and validates the value of a rejected record
// whose canon-schema header is schema. Members it does not know are
// ignored. A zero field of l is taken from DefaultLimits.
func DecodeRejected(schema string, value []byte, l Limits) (*Rejected, error) {
	if err := expectSchema(schema, KindRejected); err != nil {
		return nil, err
	}
	l = l.orDefaults()
	var members rejectedMembers
	if err := readObject(schema, value, members.walk); err != nil {
		return nil, err
	}
	r := new(Rejected)
	if err := parseRejected(&members, r); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	if err := validateRejected(r, l, false); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	return r, nil
}

// EncodeChunk returns the value of c's chunk/v1 record, c.Data itself,
// and its canon-chunk header, the SHA-256 of c.Data: c.Hash is not
// trusted. The record key is ProjectKey(c.Org, c.Project).
func EncodeChunk(c *Chunk) (value []byte, hashHeader string) {
	sum := sha256.Sum256(c.Data)
	return c.Data, hex.EncodeToString(sum[:])
}

// DecodeChunk checks a chunk record: its canon-schema header (schema), its
// canon-chunk header (hashHeader), which must be the SHA-256 of value,
// its key, which gives Org and Project, and its size. Data is value
// itself, not a copy. A zero field of l is taken from DefaultLimits.
func DecodeChunk(schema, hashHeader string, key, value []byte, l Limits) (*Chunk, error) {
	if err := expectSchema(schema, KindChunk); err != nil {
		return nil, err
	}
	l = l.orDefaults()
	org, project, err := ParseProjectKey(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	if len(value) > l.MaxChunkBytes {
		return nil, fmt.Errorf("%s: %w", schema, tooLarge("value", len(value), l.MaxChunkBytes, "MaxChunkBytes"))
	}
	if len(value) == 0 {
		return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: "value", Reason: "is empty: a chunk holds at least one byte of an item body"})
	}
	if hashHeader == "" {
		return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: HeaderChunkHash, Reason: "header is missing: set it to the SHA-256 of the value in lower-case hex"})
	}
	if err := ValidateHash(HeaderChunkHash, hashHeader); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	sum := sha256.Sum256(value)
	if hex.EncodeToString(sum[:]) != hashHeader {
		return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: HeaderChunkHash,
			Reason: fmt.Sprintf("header says %s but the value's SHA-256 is %x: the value is corrupt or the header belongs to another chunk", hashHeader, sum)})
	}
	return &Chunk{Org: org, Project: project, Hash: hashHeader, Data: value}, nil
}

// orDefaults replaces zero or negative fields by their defaults.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxScalarsBytes, d.MaxScalarsBytes)
	set(&l.MaxMetaBytes, d.MaxMetaBytes)
	set(&l.MaxDataBytes, d.MaxDataBytes)
	set(&l.MaxArgsBytes, d.MaxArgsBytes)
	set(&l.MaxMutationBytes, d.MaxMutationBytes)
	set(&l.MaxChunkBytes, d.MaxChunkBytes)
	return l
}
