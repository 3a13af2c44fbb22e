package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// maxPrincipalBytes bounds the principal the ingest stamps on a mutation.
const maxPrincipalBytes = 256

// Validate checks m the way DecodeMutation and EncodeMutation do: names,
// ids, timestamps and sizes. A zero field of l is taken from
// DefaultLimits.
func (m *Mutation) Validate(l Limits) error { return validateMutation(m, l.orDefaults(), top, true) }

// Validate checks v the way DecodeVersion and EncodeVersion do. A zero
// field of l is taken from DefaultLimits.
func (v *Version) Validate(l Limits) error { return validateVersion(v, l.orDefaults(), true) }

// Validate checks r the way DecodeRejected and EncodeRejected do. A zero
// field of l is taken from DefaultLimits.
func (r *Rejected) Validate(l Limits) error { return validateRejected(r, l.orDefaults(), true) }

// The validate* functions check what a record's values mean. checkJSON
// asks them to also check that raw JSON fields are JSON, which decoded
// records are already known to be.

func validateMutation(m *Mutation, l Limits, a at, checkJSON bool) error {
	if err := ValidateOrg("", m.Org); err != nil {
		return a.wrap("org", err)
	}
	if err := ValidateProject("", m.Project); err != nil {
		return a.wrap("project", err)
	}
	if m.Branch == "" {
		return a.errorf("branch", "is empty: name the branch (the ingest sets %q when a client names none)", DefaultBranch)
	}
	if err := ValidateBranch("", m.Branch); err != nil {
		return a.wrap("branch", err)
	}
	if err := ValidateClient("", m.ClientGroup); err != nil {
		return a.wrap("clientGroup", err)
	}
	if err := ValidateClient("", m.Client); err != nil {
		return a.wrap("client", err)
	}
	if m.ID == 0 {
		return a.errorf("id", "must be an integer >= 1, got 0: a client's ids start at 1")
	}
	if err := ValidateMutatorName("", m.Name); err != nil {
		return a.wrap("name", err)
	}
	if err := validateArgs(m.Args, l, a, checkJSON); err != nil {
		return err
	}
	if m.TS < 0 {
		return a.errorf("ts", "must be an integer >= 0 (milliseconds since the epoch), got %d", m.TS)
	}
	if m.Principal != "" {
		if err := validateText("", m.Principal, maxPrincipalBytes); err != nil {
			return a.wrap("principal", err)
		}
	}
	if m.ReceivedAt < 0 {
		return a.errorf("receivedAt", "must be an integer >= 0 (milliseconds since the epoch), got %d", m.ReceivedAt)
	}
	return validateLineage(m.Job, m.Origin, a)
}

// maxCodeBytes bounds an error outcome's code.
const maxCodeBytes = 64

// validateLineage checks the job and origin a pipeline job stamps.
func validateLineage(j *Job, o *Origin, a at) error {
	if j != nil {
		if err := validateText("", j.Kind, maxCodeBytes); err != nil {
			return a.wrap("job.kind", err)
		}
		if j.Principal != "" {
			if err := validateText("", j.Principal, maxPrincipalBytes); err != nil {
				return a.wrap("job.principal", err)
			}
		}
		if j.At < 0 {
			return a.errorf("job.at", "must be an integer >= 0 (milliseconds since the epoch), got %d", j.At)
		}
	}
	if o != nil {
		if o.Project != "" {
			if err := validateText("", o.Project, 2*maxPrincipalBytes); err != nil {
				return a.wrap("origin.project", err)
			}
		}
		if err := ValidateBranch("", o.Branch); err != nil {
			return a.wrap("origin.branch", err)
		}
		if err := ValidateClient("", o.Client); err != nil {
			return a.wrap("origin.client", err)
		}
		if o.ID == 0 {
			return a.errorf("origin.id", "must be an integer >= 1, got 0")
		}
	}
	return nil
}

func validateArgs(args json.RawMessage, l Limits, a at, checkJSON bool) error {
	if len(args) > l.MaxArgsBytes {
		return tooLarge(a.field("args"), len(args), l.MaxArgsBytes, "MaxArgsBytes")
	}
	if checkJSON && len(args) > 0 && !ValidJSON(args) {
		return a.errorf("args", "is not valid JSON: %s", preview(args))
	}
	if !utf8.Valid(args) {
		// The JSON checks take such bytes inside strings; the record's
		// decoder refuses them (undecodable), so its encoder must too.
		return a.errorf("args", "is not valid UTF-8: JSON text is UTF-8")
	}
	return nil
}

func validateVersion(v *Version, l Limits, checkJSON bool) error {
	a := top
	if err := ValidateOrg("", v.Org); err != nil {
		return a.wrap("org", err)
	}
	if err := ValidateProject("", v.Project); err != nil {
		return a.wrap("project", err)
	}
	if err := ValidateBranch("", v.Branch); err != nil {
		return a.wrap("branch", err)
	}
	if v.Version == 0 {
		return a.errorf("version", "must be an integer >= 1, got 0: versions count from 1")
	}
	if v.Parent != v.Version-1 {
		return a.errorf("parent", "must be version-1 = %d, got %d", v.Version-1, v.Parent)
	}
	if b := v.Base; b != nil {
		ba := nested("base")
		if err := ValidateBranch("", b.Branch); err != nil {
			return ba.wrap("branch", err)
		}
		if b.Version == 0 {
			return ba.errorf("version", "must be an integer >= 1, got 0")
		}
		if v.Version != 1 {
			return a.errorf("base", "is set on version %d: only the first version of a branch (version 1) has a base", v.Version)
		}
		if b.Branch == v.Branch {
			return ba.errorf("branch", "is the version's own branch %q: a branch starts from another one", b.Branch)
		}
	}
	if v.TS < 0 {
		return a.errorf("ts", "must be an integer >= 0 (milliseconds since the epoch), got %d", v.TS)
	}
	if v.Bundle != "" {
		if err := ValidateHash("bundle", v.Bundle); err != nil {
			return err
		}
	}
	if v.DecidedAt < 0 {
		return a.errorf("decidedAt", "must be an integer >= 0 (milliseconds since the epoch), got %d", v.DecidedAt)
	}
	if err := validateScalars(v.Scalars, l); err != nil {
		return err
	}
	for i := range v.Items {
		it := &v.Items[i]
		if err := validateItem(it, element("items", i), l); err != nil {
			return err
		}
		if i > 0 {
			p := &v.Items[i-1]
			if p.Collection > it.Collection || p.Collection == it.Collection && p.ID >= it.ID {
				return &FieldError{Field: fmt.Sprintf("items[%d]", i), Reason: fmt.Sprintf(
					"(%q, %q) does not come after items[%d] (%q, %q): items must be sorted by (collection, id), each at most once",
					it.Collection, short(it.ID), i-1, p.Collection, short(p.ID))}
			}
		}
	}
	if len(v.Mutations) == 0 {
		return a.errorf("mutations", "is empty: a version is made of at least one mutation")
	}
	for i := range v.Mutations {
		if err := validateOutcome(&v.Mutations[i], element("mutations", i), l, checkJSON); err != nil {
			return err
		}
	}
	if err := validateLastIDs(v.LastIDs); err != nil {
		return err
	}
	if err := ValidateHash("", v.StateHash); err != nil {
		return a.wrap("stateHash", err)
	}
	if v.Source.Partition < 0 {
		return nested("source").errorf("partition", "must be an integer >= 0, got %d", v.Source.Partition)
	}
	if v.Source.Offset < 0 {
		return nested("source").errorf("offset", "must be an integer >= 0, got %d", v.Source.Offset)
	}
	return nil
}

// validateScalars checks the scalars' names, that their values are JSON
// that RFC 8785 can canonicalize (the state hash does) and the size of
// their canonical JSON together.
func validateScalars(sc map[string]json.RawMessage, l Limits) error {
	size := 2 // {}
	i := 0
	for name, val := range sc {
		n, err := checkScalar(name, val)
		if err != nil {
			// Report the first bad scalar in name order, not in map order.
			for _, name := range sortedKeys(sc) {
				if _, err := checkScalar(name, sc[name]); err != nil {
					return err
				}
			}
		}
		if i > 0 {
			size++ // ,
		}
		i++
		size += len(name) + 3 + n // "name":value; names need no escaping
	}
	if size > l.MaxScalarsBytes {
		return &FieldError{
			Field:  "scalars",
			Reason: fmt.Sprintf("too large: %d bytes of canonical JSON, over the limit of %d bytes (MaxScalarsBytes): keep large values in items", size, l.MaxScalarsBytes),
			Err:    ErrTooLarge,
		}
	}
	return nil
}

func checkScalar(name string, val json.RawMessage) (int, error) {
	a := nested("scalars")
	if err := ValidateScalarName("", name); err != nil {
		return 0, a.wrap(short(name), err)
	}
	n, err := canonicalLen(val)
	if err != nil {
		return 0, a.errorf(short(name), "is not JSON that RFC 8785 can canonicalize: %v", err)
	}
	return n, nil
}

// canonicalLen is the length of the canonical JSON (RFC 8785) of v, or an
// error if v is not JSON jcs can canonicalize. Short strings, literals and
// small integers, most scalars, are their own canonical form.
func canonicalLen(v []byte) (int, error) {
	if canonicalAsIs(v) {
		return len(v), nil
	}
	if len(v) == 0 {
		return 0, fmt.Errorf("no value")
	}
	c, err := jcs.Transform(v)
	if err != nil {
		return 0, err
	}
	return len(c), nil
}

// canonicalAsIs reports whether v is one of the values that are their own
// canonical form at a glance: a string without escapes or control
// characters, a literal, or a small integer.
func canonicalAsIs(v []byte) bool {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		s := v[1 : len(v)-1]
		if bytes.IndexByte(s, '\\') < 0 && bytes.IndexByte(s, '"') < 0 && utf8.Valid(s) && !hasControl(s) {
			return true
		}
	}
	switch string(v) {
	case "true", "false", "null":
		return true
	}
	return smallInteger(v)
}

func hasControl(s []byte) bool {
	for _, c := range s {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// smallInteger reports whether v is an integer that RFC 8785 writes as
// it is: no leading zero, not -0, at most 15 digits.
func smallInteger(v []byte) bool {
	d := v
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 15 || d[0] == '0' && (len(d) > 1 || len(v) > 1) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func validateLastIDs(ids map[string]uint64) error {
	a := nested("lastIds")
	check := func(client string, id uint64) error {
		if err := ValidateClient("", client); err != nil {
			return a.wrap(short(client), err)
		}
		if id == 0 {
			return a.errorf(short(client), "must be an integer >= 1, got 0")
		}
		return nil
	}
	for client, id := range ids {
		if check(client, id) != nil {
			for _, client := range sortedKeys(ids) {
				if err := check(client, ids[client]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func validateItem(it *ItemChange, a at, l Limits) error {
	if err := ValidateCollection("", it.Collection); err != nil {
		return a.wrap("collection", err)
	}
	if err := ValidateItemID("", it.ID); err != nil {
		return a.wrap("id", err)
	}
	switch it.Op {
	case OpPut:
		if it.Hash == "" {
			return a.errorf("hash", "is required for a put: the SHA-256 of the body")
		}
		if err := ValidateHash("", it.Hash); err != nil {
			return a.wrap("hash", err)
		}
		if it.Size <= 0 {
			return a.errorf("size", "must be an integer >= 1 for a put (the body's length in bytes), got %d", it.Size)
		}
		if it.Size > int64(l.MaxDataBytes) {
			return tooLarge(a.field("size"), it.Size, l.MaxDataBytes, "MaxDataBytes")
		}
		if len(it.Chunks) == 0 {
			return a.errorf("chunks", "is required for a put: the hashes of the body's chunks, at least one")
		}
		if int64(len(it.Chunks)) > it.Size {
			return a.errorf("chunks", "lists %d chunks for a %d-byte body: a chunk holds at least one byte", len(it.Chunks), it.Size)
		}
		for j, c := range it.Chunks {
			if err := ValidateHash("", c); err != nil {
				return a.wrap(fmt.Sprintf("chunks[%d]", j), err)
			}
		}
		if it.Meta != nil {
			return validateMeta(it.Meta, a, l)
		}
	case OpDelete:
		for _, f := range []struct {
			name    string
			present bool
		}{{"meta", len(it.Meta) > 0}, {"hash", it.Hash != ""}, {"size", it.Size != 0}, {"chunks", len(it.Chunks) > 0}} {
			if f.present {
				return a.errorf(f.name, "must be absent on a delete: remove it")
			}
		}
	default:
		return a.errorf("op", "must be %q or %q, got %q", OpPut, OpDelete, short(it.Op))
	}
	return nil
}

// validateMeta checks that meta is canonical JSON: the state hash digests
// its bytes, so two writers must agree on them.
func validateMeta(meta json.RawMessage, a at, l Limits) error {
	if len(meta) > l.MaxMetaBytes {
		return tooLarge(a.field("meta"), len(meta), l.MaxMetaBytes, "MaxMetaBytes")
	}
	c, err := jcs.Transform(meta)
	if err != nil {
		return a.errorf("meta", "is not JSON that RFC 8785 can canonicalize: %v", err)
	}
	if !bytes.Equal(c, meta) {
		return a.errorf("meta", "is not canonical JSON (RFC 8785): write it canonicalized, as %s", preview(c))
	}
	return nil
}

func validateBlobRef(r *BlobRef, a at, limit int64, limitName string) error {
	if err := ValidateHash("", r.Hash); err != nil {
		return a.wrap("hash", err)
	}
	if r.Size < 1 {
		return a.errorf("size", "must be an integer >= 1, got %d", r.Size)
	}
	if r.Size > limit {
		return tooLarge(a.field("size"), int(r.Size), int(limit), limitName)
	}
	if len(r.Chunks) == 0 {
		return a.errorf("chunks", "must list at least one chunk")
	}
	if int64(len(r.Chunks)) > r.Size {
		return a.errorf("chunks", "lists %d chunks for %d bytes: a chunk holds at least one byte", len(r.Chunks), r.Size)
	}
	for j, c := range r.Chunks {
		if err := ValidateHash("", c); err != nil {
			return a.wrap("chunks["+strconv.Itoa(j)+"]", err)
		}
	}
	return nil
}

func validateOutcome(o *Outcome, a at, l Limits, checkJSON bool) error {
	if err := ValidateClient("", o.ClientGroup); err != nil {
		return a.wrap("clientGroup", err)
	}
	if err := ValidateClient("", o.Client); err != nil {
		return a.wrap("client", err)
	}
	if o.ID == 0 {
		return a.errorf("id", "must be an integer >= 1, got 0")
	}
	if err := ValidateMutatorName("", o.Name); err != nil {
		return a.wrap("name", err)
	}
	if o.ArgsRef != nil {
		if len(o.Args) > 0 && string(o.Args) != "null" {
			return a.errorf("args", "must be null when argsRef names the args")
		}
		if err := validateBlobRef(o.ArgsRef, a.child("argsRef"), int64(l.MaxArgsBytes), "MaxArgsBytes"); err != nil {
			return err
		}
		if o.ArgsRef.Size <= InlineArgsBytes {
			return a.errorf("argsRef", "names %d bytes of args: args of at most %d bytes are inline", o.ArgsRef.Size, InlineArgsBytes)
		}
	} else if err := validateArgs(o.Args, l, a, checkJSON); err != nil {
		return err
	}
	switch o.Status {
	case StatusApplied:
		if o.Error != "" {
			return a.errorf("error", "must be absent when status is %q", StatusApplied)
		}
	case StatusError:
		if o.Error == "" {
			return a.errorf("error", "is required when status is %q: the mutator's error message", StatusError)
		}
	default:
		return a.errorf("status", "must be %q or %q, got %q", StatusApplied, StatusError, short(o.Status))
	}
	if o.TS < 0 {
		return a.errorf("ts", "must be an integer >= 0 (milliseconds since the epoch), got %d", o.TS)
	}
	if o.Principal != "" {
		if err := validateText("", o.Principal, maxPrincipalBytes); err != nil {
			return a.wrap("principal", err)
		}
	}
	if o.ReceivedAt < 0 {
		return a.errorf("receivedAt", "must be an integer >= 0 (milliseconds since the epoch), got %d", o.ReceivedAt)
	}
	if o.Offset < 0 {
		return a.errorf("offset", "must be an integer >= 0, got %d", o.Offset)
	}
	if o.Code != "" {
		if o.Status != StatusError {
			return a.errorf("code", "must be absent when status is %q", o.Status)
		}
		if err := validateText("", o.Code, maxCodeBytes); err != nil {
			return a.wrap("code", err)
		}
	}
	return validateLineage(o.Job, o.Origin, a)
}

func validateRejected(r *Rejected, l Limits, checkJSON bool) error {
	a := top
	if !validReason(r.Reason) {
		return a.errorf("reason", "%q is not a reason code: use 1-64 of a-z and '_', starting with a letter, e.g. %q", short(r.Reason), ReasonInvalid)
	}
	if r.Message == "" {
		return a.errorf("message", "is empty: say what was wrong and what to fix")
	}
	if !validTopic(r.Topic) {
		return a.errorf("topic", "%q is not a Kafka topic name: use 1-249 of letters, digits, '.', '_' and '-'", short(r.Topic))
	}
	if r.Partition < 0 {
		return a.errorf("partition", "must be an integer >= 0, got %d", r.Partition)
	}
	if r.Offset < 0 {
		return a.errorf("offset", "must be an integer >= 0, got %d", r.Offset)
	}
	if r.Mutation != nil {
		if err := validateMutation(r.Mutation, l, nested("mutation"), checkJSON); err != nil {
			return err
		}
	}
	if r.Reason == ReasonGap && r.ExpectedID == 0 {
		return a.errorf("expectedId", "is required when reason is %q: the id the client must send next", ReasonGap)
	}
	if len(r.Value) > MaxRejectedValueBytes {
		return tooLarge("value", len(r.Value), MaxRejectedValueBytes, "MaxRejectedValueBytes: keep the start of the value")
	}
	if r.At < 0 {
		return a.errorf("at", "must be an integer >= 0 (milliseconds since the epoch), got %d", r.At)
	}
	return nil
}

func validReason(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

func validTopic(s string) bool {
	if s == "" || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
