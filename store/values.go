package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// The store's values are compact binary: item entries, manifests and
// version records (a fixed header that heads and states read, with the
// scalars as JSON, then the rest of the version). Apply writes them on its
// hot path, so they are appended to reused buffers.

// entry is an item as the MVCC entries and the latest index hold it. The
// collection and id are in the key.
type entry struct {
	deleted bool
	version uint64
	meta    []byte
	hash    [32]byte
	size    int64
	chunks  [][32]byte
}

const (
	entryTombstone byte = 0
	entryPut       byte = 1
	// entryPutOneChunk is a put of a body that is one chunk, the chunk of
	// its own hash (most bodies): the chunk list is not written.
	entryPutOneChunk byte = 2
)

// oneChunk reports whether a body's chunk list is its own hash alone.
func oneChunk(hash [32]byte, chunks [][32]byte) bool {
	return len(chunks) == 1 && chunks[0] == hash
}

func (e *entry) encode() []byte {
	return e.appendTo(make([]byte, 0, 1+3*binary.MaxVarintLen64+len(e.meta)+32*(1+len(e.chunks))+binary.MaxVarintLen64))
}

func (e *entry) appendTo(b []byte) []byte {
	if e.deleted {
		return append(b, entryTombstone)
	}
	one := oneChunk(e.hash, e.chunks)
	if one {
		b = append(b, entryPutOneChunk)
	} else {
		b = append(b, entryPut)
	}
	b = binary.AppendUvarint(b, e.version)
	b = binary.AppendUvarint(b, uint64(len(e.meta)))
	b = append(b, e.meta...)
	b = append(b, e.hash[:]...)
	b = binary.AppendUvarint(b, uint64(e.size))
	if one {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(e.chunks)))
	for _, c := range e.chunks {
		b = append(b, c[:]...)
	}
	return b
}

// decodeEntry decodes an entry; the result does not alias b.
func decodeEntry(b []byte) (entry, error) {
	e, err := decodeEntryNoCopy(b)
	if len(e.meta) > 0 {
		e.meta = append([]byte(nil), e.meta...)
	}
	return e, err
}

// decodeEntryNoCopy decodes an entry whose meta aliases b.
func decodeEntryNoCopy(b []byte) (entry, error) {
	d := decoder{b: b}
	var e entry
	switch kind := d.byte(); kind {
	case entryTombstone:
		e.deleted = true
	case entryPut, entryPutOneChunk:
		e.version = d.uvarint()
		if meta := d.bytes(int(d.uvarint())); len(meta) > 0 {
			e.meta = meta
		}
		e.hash = d.hash()
		e.size = int64(d.uvarint())
		if kind == entryPutOneChunk {
			e.chunks = [][32]byte{e.hash}
			break
		}
		n := d.uvarint()
		if n > uint64(len(d.b))/32 {
			return entry{}, fmt.Errorf("%w: item entry of %d chunks in %d bytes", ErrCorrupt, n, len(d.b))
		}
		e.chunks = make([][32]byte, n)
		for i := range e.chunks {
			e.chunks[i] = d.hash()
		}
	default:
		d.fail()
	}
	if err := d.done("item entry"); err != nil {
		return entry{}, err
	}
	return e, nil
}

// digest is the entry's contribution to the state hash.
func (e *entry) digest(collection, id string) [32]byte {
	return schemas.ItemDigest(collection, id, e.meta, hexString(e.hash))
}

func hexString(h [32]byte) string {
	var b [64]byte
	hex.Encode(b[:], h[:])
	return string(b[:])
}

func (e *entry) ref(collection, id string) model.ItemRef {
	r := model.ItemRef{
		Collection: collection,
		ID:         id,
		Hash:       hexString(e.hash),
		Size:       e.size,
		Version:    e.version,
	}
	if e.meta != nil {
		r.Meta = json.RawMessage(e.meta)
	}
	if len(e.chunks) > 0 {
		r.Chunks = make([]string, len(e.chunks))
	}
	for i, c := range e.chunks {
		r.Chunks[i] = hexString(c)
	}
	return r
}

// manifest is how a body is made of chunks.
type manifest struct {
	size   int64
	chunks [][32]byte
}

func (m *manifest) encode() []byte {
	b := make([]byte, 0, 2*binary.MaxVarintLen64+32*len(m.chunks))
	b = binary.AppendUvarint(b, uint64(m.size))
	b = binary.AppendUvarint(b, uint64(len(m.chunks)))
	for _, c := range m.chunks {
		b = append(b, c[:]...)
	}
	return b
}

func decodeManifest(b []byte) (manifest, error) {
	d := decoder{b: b}
	m := manifest{size: int64(d.uvarint())}
	n := d.uvarint()
	if n > uint64(len(d.b))/32 {
		return manifest{}, fmt.Errorf("%w: manifest of %d chunks in %d bytes", ErrCorrupt, n, len(d.b))
	}
	m.chunks = make([][32]byte, n)
	for i := range m.chunks {
		m.chunks[i] = d.hash()
	}
	return m, d.done("manifest")
}

// versionHeader is the fixed part of a version record: what Head, HeadAt
// and the duplicate check read without decoding the whole version.
type versionHeader struct {
	format    byte
	sum       schemas.StateHasher
	stateHash [32]byte
	ts        int64
	scalars   []byte // JSON object
}

// versionRecordFormat is the format the store writes. Format 3 is
// format 2 followed by the analysts' members of a version (see
// appendVersionTrailer); format 4 adds the bundle hash after them.
// Records of formats 2 and 3, written before, are still read.
const (
	versionRecordFormat   byte = 4
	versionRecordFormatV3 byte = 3
	versionRecordFormatV2 byte = 2
)

// appendVersionRecord appends a version record: format | state sum |
// state hash | timestamp | scalars (JSON, length-prefixed) | the rest of
// the version in binary (see appendVersionBody). States and heads read
// the header only: the rest, with the mutations' args, can be large.
//
// The scalars' values must be valid JSON (Apply checked them when it
// computed the state hash); they are written as they are, and their names
// sorted, so that equal scalars give equal bytes.
func appendVersionRecord(b []byte, v *schemas.Version, sum schemas.StateHasher, stateHash [32]byte) []byte {
	b = append(b, versionRecordFormat)
	b = append(b, sum.Sum[:]...)
	b = append(b, stateHash[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(v.TS))
	// The scalars, length-prefixed: written after room for the longest
	// prefix, then moved up against the actual one.
	lenAt := len(b)
	b = append(b, make([]byte, binary.MaxVarintLen32)...)
	start := len(b)
	b = appendScalarsJSON(b, v.Scalars)
	n := len(b) - start
	var pre [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(pre[:], uint64(n))
	copy(b[lenAt:], pre[:k])
	b = append(b[:lenAt+k], b[start:]...)
	return appendVersionBody(b, v)
}

// appendScalarsJSON appends the scalars as a JSON object, names sorted.
func appendScalarsJSON(b []byte, scalars map[string]json.RawMessage) []byte {
	b = append(b, '{')
	if len(scalars) > 0 {
		var buf [16]string
		names := buf[:0]
		for name := range scalars {
			names = append(names, name)
		}
		slices.Sort(names)
		for i, name := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = schemas.AppendJSONString(b, name, false)
			b = append(b, ':')
			b = append(b, scalars[name]...)
		}
	}
	return append(b, '}')
}

// appendVersionBody appends the version without its timestamp, scalars
// and state hash (they are in the header) in a compact binary form:
// strings and JSON texts length-prefixed, hashes as their 32 bytes, and
// the length of a slice or map plus one, 0 standing for nil, so that
// decoding gives back exactly the version that was applied.
func appendVersionBody(b []byte, v *schemas.Version) []byte {
	b = appendStr(b, v.Org)
	b = appendStr(b, v.Project)
	b = appendStr(b, v.Branch)
	b = binary.AppendUvarint(b, v.Version)
	b = binary.AppendUvarint(b, v.Parent)
	if v.Base == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendStr(b, v.Base.Branch)
		b = binary.AppendUvarint(b, v.Base.Version)
	}
	b = appendCount(b, len(v.Items), v.Items == nil)
	for i := range v.Items {
		c := &v.Items[i]
		b = appendStr(b, c.Collection)
		b = appendStr(b, c.ID)
		b = appendStr(b, c.Op)
		b = appendRaw(b, c.Meta)
		b = appendHashString(b, c.Hash)
		b = binary.AppendVarint(b, c.Size)
		if len(c.Chunks) == 1 && c.Chunks[0] == c.Hash {
			b = append(b, chunksOwnHash)
		} else {
			b = append(b, chunksListed)
			b = appendHashStrings(b, c.Chunks)
		}
	}
	b = appendCount(b, len(v.Mutations), v.Mutations == nil)
	for i := range v.Mutations {
		m := &v.Mutations[i]
		b = appendStr(b, m.ClientGroup)
		b = appendStr(b, m.Client)
		b = binary.AppendUvarint(b, m.ID)
		b = appendStr(b, m.Name)
		b = appendRaw(b, m.Args)
		if m.ArgsRef == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendHashString(b, m.ArgsRef.Hash)
			b = binary.AppendVarint(b, m.ArgsRef.Size)
			b = appendHashStrings(b, m.ArgsRef.Chunks)
		}
		b = appendStr(b, m.Status)
		b = appendStr(b, m.Error)
		b = binary.AppendVarint(b, m.TS)
		b = appendStr(b, m.Principal)
		b = binary.AppendVarint(b, m.ReceivedAt)
		b = binary.AppendVarint(b, m.Offset)
	}
	b = appendCount(b, len(v.LastIDs), v.LastIDs == nil)
	if len(v.LastIDs) == 1 {
		for client, id := range v.LastIDs {
			b = appendStr(b, client)
			b = binary.AppendUvarint(b, id)
		}
	} else if len(v.LastIDs) > 1 {
		for _, client := range slices.Sorted(maps.Keys(v.LastIDs)) {
			b = appendStr(b, client)
			b = binary.AppendUvarint(b, v.LastIDs[client])
		}
	}
	b = binary.AppendVarint(b, int64(v.Source.Partition))
	b = binary.AppendVarint(b, v.Source.Offset)
	return appendVersionTrailer(b, v)
}

// appendVersionTrailer appends what formats 3 and 4 added to a version:
// when the sequencer decided it, and each mutation's error code, job and
// origin (a presence byte before each of the last two), then the hash of
// the bundle that decided it, so that the read API serves the version
// the changelog holds.
func appendVersionTrailer(b []byte, v *schemas.Version) []byte {
	b = binary.AppendVarint(b, v.DecidedAt)
	for i := range v.Mutations {
		m := &v.Mutations[i]
		b = appendStr(b, m.Code)
		if m.Job == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendStr(b, m.Job.Kind)
			b = appendStr(b, m.Job.Principal)
			b = binary.AppendVarint(b, m.Job.At)
		}
		if m.Origin == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = appendStr(b, m.Origin.Project)
			b = appendStr(b, m.Origin.Branch)
			b = binary.AppendUvarint(b, m.Origin.Version)
			b = appendStr(b, m.Origin.Client)
			b = binary.AppendUvarint(b, m.Origin.ID)
		}
	}
	return appendStr(b, v.Bundle)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendRaw appends a JSON text, nil apart from empty.
func appendRaw(b []byte, raw json.RawMessage) []byte {
	b = appendCount(b, len(raw), raw == nil)
	return append(b, raw...)
}

func appendCount(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

// An item's chunk list is its own hash alone (a body of one chunk), or is
// listed.
const (
	chunksListed  byte = 0
	chunksOwnHash byte = 1
)

// A hash string is a SHA-256 in lower-case hex, written as tag 1 and its
// 32 bytes, or anything else (the empty hash of a deletion), written as
// tag 0 and the string.
const (
	tagString byte = 0
	tagHash   byte = 1
)

func appendHashString(b []byte, s string) []byte {
	if h, ok := decodeHex32(s); ok {
		b = append(b, tagHash)
		return append(b, h[:]...)
	}
	b = append(b, tagString)
	return appendStr(b, s)
}

func appendHashStrings(b []byte, hs []string) []byte {
	b = appendCount(b, len(hs), hs == nil)
	for _, h := range hs {
		b = appendHashString(b, h)
	}
	return b
}

// decodeHex32 decodes a SHA-256 in lower-case hex, the only spelling
// Canon writes.
func decodeHex32(s string) (h [32]byte, ok bool) {
	if len(s) != 64 {
		return h, false
	}
	var bad byte
	for i := range h {
		hi, lo := hexLower[s[2*i]], hexLower[s[2*i+1]]
		bad |= hi | lo
		h[i] = hi<<4 | lo&0xF
	}
	return h, bad&0x10 == 0
}

// hexLower maps the lower-case hex digits to their values and every
// other byte to 0x10.
var hexLower = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x10
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// decodeVersionHeader decodes the fixed part of a version record and
// returns the rest, which aliases b; the header does not.
func decodeVersionHeader(b []byte) (versionHeader, []byte, error) {
	d := decoder{b: b}
	var h versionHeader
	if h.format = d.byte(); h.format != versionRecordFormat && h.format != versionRecordFormatV3 && h.format != versionRecordFormatV2 && d.err == nil {
		return versionHeader{}, nil, fmt.Errorf("%w: version record of unknown format %d", ErrCorrupt, h.format)
	}
	h.sum.Sum = d.hash()
	h.stateHash = d.hash()
	h.ts = int64(d.uint64())
	h.scalars = append([]byte(nil), d.bytes(int(d.uvarint()))...)
	if d.err != nil {
		return versionHeader{}, nil, fmt.Errorf("%w: truncated version record", ErrCorrupt)
	}
	return h, d.b, nil
}

func (h *versionHeader) decodeScalars() (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(h.scalars, &m); err != nil {
		return nil, fmt.Errorf("%w: version scalars: %w", ErrCorrupt, err)
	}
	if m == nil {
		m = map[string]json.RawMessage{} // JSON null: the store writes {}
	}
	return m, nil
}

// decodeVersionRecord decodes a whole version record.
func decodeVersionRecord(b []byte) (schemas.Version, versionHeader, error) {
	h, rest, err := decodeVersionHeader(b)
	if err != nil {
		return schemas.Version{}, h, err
	}
	v := schemas.Version{TS: h.ts, StateHash: hex.EncodeToString(h.stateHash[:])}
	if v.Scalars, err = h.decodeScalars(); err != nil {
		return schemas.Version{}, h, err
	}
	d := decoder{b: rest}
	v.Org, v.Project, v.Branch = d.str(), d.str(), d.str()
	v.Version, v.Parent = d.uvarint(), d.uvarint()
	if d.byte() == 1 {
		v.Base = &schemas.BranchRef{Branch: d.str()}
		v.Base.Version = d.uvarint()
	}
	if n, ok := d.count(); ok {
		v.Items = make([]schemas.ItemChange, n)
		for i := range v.Items {
			c := &v.Items[i]
			c.Collection, c.ID, c.Op = d.str(), d.str(), d.str()
			c.Meta = d.raw()
			c.Hash = d.hashString()
			c.Size = d.varint()
			switch d.byte() {
			case chunksOwnHash:
				c.Chunks = []string{c.Hash}
			case chunksListed:
				c.Chunks = d.hashStrings()
			default:
				d.fail()
			}
		}
	}
	if n, ok := d.count(); ok {
		v.Mutations = make([]schemas.Outcome, n)
		for i := range v.Mutations {
			m := &v.Mutations[i]
			m.ClientGroup, m.Client = d.str(), d.str()
			m.ID = d.uvarint()
			m.Name = d.str()
			m.Args = d.raw()
			if d.byte() == 1 {
				m.ArgsRef = &schemas.BlobRef{Hash: d.hashString()}
				m.ArgsRef.Size = d.varint()
				m.ArgsRef.Chunks = d.hashStrings()
			}
			m.Status, m.Error = d.str(), d.str()
			m.TS = d.varint()
			m.Principal = d.str()
			m.ReceivedAt = d.varint()
			m.Offset = d.varint()
		}
	}
	if n, ok := d.count(); ok {
		v.LastIDs = make(map[string]uint64, n)
		for range n {
			client := d.str()
			v.LastIDs[client] = d.uvarint()
		}
	}
	v.Source.Partition = int32(d.varint())
	v.Source.Offset = d.varint()
	if h.format >= versionRecordFormatV3 {
		v.DecidedAt = d.varint()
		for i := range v.Mutations {
			m := &v.Mutations[i]
			m.Code = d.str()
			if d.byte() == 1 {
				m.Job = &schemas.Job{Kind: d.str(), Principal: d.str()}
				m.Job.At = d.varint()
			}
			if d.byte() == 1 {
				m.Origin = &schemas.Origin{Project: d.str(), Branch: d.str()}
				m.Origin.Version = d.uvarint()
				m.Origin.Client = d.str()
				m.Origin.ID = d.uvarint()
			}
		}
	}
	if h.format >= versionRecordFormat {
		v.Bundle = d.str()
	}
	if err := d.done("version record"); err != nil {
		return schemas.Version{}, h, err
	}
	return v, h, nil
}

// MutationStatus is what became of a mutation that was applied or
// recorded with an error.
type MutationStatus struct {
	// Version is the branch version the mutation is part of.
	Version uint64 `json:"version"`
	// Status is schemas.StatusApplied or schemas.StatusError.
	Status string `json:"status"`
	// Error is the mutator's error message (status error).
	Error string `json:"error,omitempty"`
	// Code is the error outcome's stable code (status error), e.g.
	// mutator_error or an application's own; empty in records written
	// before codes were stored.
	Code string `json:"code,omitempty"`
}

// appendTo encodes the record: version | status | error [| code]. The
// code is a trailing field, left out when empty, so that a record written
// before codes were stored (it ends after the error) reads as one without
// a code and records without codes stay byte for byte what they were.
func (m *MutationStatus) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, m.Version)
	b = binary.AppendUvarint(b, uint64(len(m.Status)))
	b = append(b, m.Status...)
	b = binary.AppendUvarint(b, uint64(len(m.Error)))
	b = append(b, m.Error...)
	if m.Code != "" {
		b = binary.AppendUvarint(b, uint64(len(m.Code)))
		b = append(b, m.Code...)
	}
	return b
}

func decodeMutationStatus(b []byte) (MutationStatus, error) {
	d := decoder{b: b}
	var m MutationStatus
	m.Version = d.uvarint()
	m.Status = string(d.bytes(int(d.uvarint())))
	m.Error = string(d.bytes(int(d.uvarint())))
	if len(d.b) > 0 && d.err == nil {
		m.Code = string(d.bytes(int(d.uvarint())))
	}
	return m, d.done("mutation record")
}

func encodeUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeUint64(b []byte, what string) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %s of %d bytes", ErrCorrupt, what, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// decoder reads a value and remembers the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errBadKey
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.fail()
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) uint64() uint64 {
	b := d.bytes(8)
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (d *decoder) hash() [32]byte {
	var h [32]byte
	copy(h[:], d.bytes(32))
	return h
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	return string(d.bytes(int(min(d.uvarint(), uint64(len(d.b)+1)))))
}

// count decodes a length written by appendCount; ok is false for nil.
// A count beyond what the rest of the value can hold is an error.
func (d *decoder) count() (n int, ok bool) {
	c := d.uvarint()
	if c == 0 || d.err != nil {
		return 0, false
	}
	if c-1 > uint64(len(d.b)) {
		d.fail()
		return 0, false
	}
	return int(c - 1), true
}

func (d *decoder) raw() json.RawMessage {
	n, ok := d.count()
	if !ok {
		return nil
	}
	return append(json.RawMessage{}, d.bytes(n)...)
}

func (d *decoder) hashString() string {
	switch d.byte() {
	case tagHash:
		h := d.hash()
		return hex.EncodeToString(h[:])
	case tagString:
		return d.str()
	}
	d.fail()
	return ""
}

func (d *decoder) hashStrings() []string {
	n, ok := d.count()
	if !ok {
		return nil
	}
	hs := make([]string, n)
	for i := range hs {
		hs[i] = d.hashString()
	}
	return hs
}

func (d *decoder) done(what string) error {
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: malformed %s", ErrCorrupt, what)
	}
	return nil
}
