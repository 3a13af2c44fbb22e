package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// The store's values: compact binary for what is read on hot paths (item
// entries, manifests, the fixed part of version records), JSON for the
// version payload, which is the changelog's own encoding.

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
)

func (e *entry) encode() []byte {
	if e.deleted {
		return []byte{entryTombstone}
	}
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(e.meta)+32*(1+len(e.chunks))+binary.MaxVarintLen64)
	b = append(b, entryPut)
	b = binary.AppendUvarint(b, e.version)
	b = binary.AppendUvarint(b, uint64(len(e.meta)))
	b = append(b, e.meta...)
	b = append(b, e.hash[:]...)
	b = binary.AppendUvarint(b, uint64(e.size))
	b = binary.AppendUvarint(b, uint64(len(e.chunks)))
	for _, c := range e.chunks {
		b = append(b, c[:]...)
	}
	return b
}

// decodeEntry decodes an entry; the result does not alias b.
func decodeEntry(b []byte) (entry, error) {
	d := decoder{b: b}
	var e entry
	switch d.byte() {
	case entryTombstone:
		e.deleted = true
	case entryPut:
		e.version = d.uvarint()
		if meta := d.bytes(int(d.uvarint())); len(meta) > 0 {
			e.meta = append([]byte(nil), meta...)
		}
		e.hash = d.hash()
		e.size = int64(d.uvarint())
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
	return schemas.ItemDigest(collection, id, e.meta, hex.EncodeToString(e.hash[:]))
}

func (e *entry) ref(collection, id string) model.ItemRef {
	r := model.ItemRef{
		Collection: collection,
		ID:         id,
		Hash:       hex.EncodeToString(e.hash[:]),
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
		r.Chunks[i] = hex.EncodeToString(c[:])
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
	sum       schemas.StateHasher
	stateHash [32]byte
	ts        int64
	scalars   []byte // JSON object
}

const versionRecordFormat byte = 1

// encodeVersionRecord encodes a version record: format | state sum |
// state hash | timestamp | scalars (JSON, length-prefixed) | the version
// as JSON without its scalars. States and heads read the header only: the
// JSON, with the mutations' args, can be large.
func encodeVersionRecord(v *schemas.Version, sum schemas.StateHasher, stateHash [32]byte) ([]byte, error) {
	scalars := v.Scalars
	if scalars == nil {
		scalars = map[string]json.RawMessage{}
	}
	sc, err := json.Marshal(scalars)
	if err != nil {
		return nil, fmt.Errorf("encode scalars: %w", err)
	}
	rest := *v
	rest.Scalars = nil
	body, err := json.Marshal(&rest)
	if err != nil {
		return nil, fmt.Errorf("encode version: %w", err)
	}
	b := make([]byte, 0, 1+64+8+binary.MaxVarintLen64+len(sc)+len(body))
	b = append(b, versionRecordFormat)
	b = append(b, sum.Sum[:]...)
	b = append(b, stateHash[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(v.TS))
	b = binary.AppendUvarint(b, uint64(len(sc)))
	b = append(b, sc...)
	return append(b, body...), nil
}

// decodeVersionHeader decodes the fixed part of a version record and
// returns the rest (the version's JSON), which aliases b; the header does
// not.
func decodeVersionHeader(b []byte) (versionHeader, []byte, error) {
	d := decoder{b: b}
	if f := d.byte(); f != versionRecordFormat && d.err == nil {
		return versionHeader{}, nil, fmt.Errorf("%w: version record of unknown format %d", ErrCorrupt, f)
	}
	var h versionHeader
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
	return m, nil
}

// decodeVersionRecord decodes a whole version record.
func decodeVersionRecord(b []byte) (schemas.Version, versionHeader, error) {
	h, rest, err := decodeVersionHeader(b)
	if err != nil {
		return schemas.Version{}, h, err
	}
	var v schemas.Version
	if err := json.Unmarshal(rest, &v); err != nil {
		return schemas.Version{}, h, fmt.Errorf("%w: version record: %w", ErrCorrupt, err)
	}
	if v.Scalars, err = h.decodeScalars(); err != nil {
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
}

func (m *MutationStatus) encode() []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(m.Status)+len(m.Error))
	b = binary.AppendUvarint(b, m.Version)
	b = binary.AppendUvarint(b, uint64(len(m.Status)))
	b = append(b, m.Status...)
	b = binary.AppendUvarint(b, uint64(len(m.Error)))
	return append(b, m.Error...)
}

func decodeMutationStatus(b []byte) (MutationStatus, error) {
	d := decoder{b: b}
	var m MutationStatus
	m.Version = d.uvarint()
	m.Status = string(d.bytes(int(d.uvarint())))
	m.Error = string(d.bytes(int(d.uvarint())))
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

func (d *decoder) done(what string) error {
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: malformed %s", ErrCorrupt, what)
	}
	return nil
}
