package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const (
	hashA = "619fb8de28f681260e9b2e73a61bc19c80f0c68bfb8cecb2eac775ecb1ae5378"
	hashB = "1031717d8bc9ad9c85a194474f9f0e7af4ecb53c34460fb1390633e167cf1a9a"
)

func testMutation() *Mutation {
	return &Mutation{
		Org: "acme", Project: "roadmap", Branch: "main",
		ClientGroup: "cg-1", Client: "c-1", ID: 7,
		Name: "item.put", Args: json.RawMessage(`{"collection":"tasks","id":"t-1"}`),
		TS: 1767225600123,
	}
}

func testVersion() *Version {
	return &Version{
		Org: "acme", Project: "roadmap", Branch: "main",
		Version: 3, Parent: 2, TS: 1767225600201,
		Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Roadmap"`)},
		Items: []ItemChange{
			{Collection: "tasks", ID: "t-1", Op: OpPut, Meta: json.RawMessage(`{"title":"x"}`), Hash: hashA, Size: 20, Chunks: []string{hashA}},
			{Collection: "tasks", ID: "t-2", Op: OpDelete},
		},
		Mutations: []Outcome{{ClientGroup: "cg-1", Client: "c-1", ID: 7, Name: "item.put", Args: json.RawMessage(`{}`), Status: StatusApplied, Offset: 41}},
		LastIDs:   map[string]uint64{"c-1": 7},
		StateHash: hashB,
		Source:    SourceRef{Partition: 2, Offset: 41},
	}
}

func TestParseSchema(t *testing.T) {
	tests := []struct {
		header    string
		kind      string
		major     int
		wantErr   string // "" for success
		wantKnown bool   // kind and major returned despite the error
	}{
		{header: "mutation/v1", kind: KindMutation, major: 1},
		{header: "version/v1", kind: KindVersion, major: 1},
		{header: "chunk/v1", kind: KindChunk, major: 1},
		{header: "rejected/v1", kind: KindRejected, major: 1},
		{header: "", wantErr: `the record has no canon-schema header: its producer must set it`},
		{header: "mutation/1", wantErr: `canon-schema header "mutation/1" is malformed: want <kind>/v<major>`},
		{header: "mutation", wantErr: `is malformed`},
		{header: "mutation/v", wantErr: `is malformed`},
		{header: "mutation/v01", wantErr: `is malformed`},
		{header: "mutation/v0", wantErr: `is malformed`},
		{header: "mutation/v1/x", wantErr: `is malformed`},
		{header: "mutation/v1 ", wantErr: `is malformed`},
		{header: "Mutation/v1", wantErr: `is malformed`},
		{header: "/v1", wantErr: `is malformed`},
		{header: "mutation/v99999999999", wantErr: `is malformed`},
		{header: "widget/v1", kind: "widget", major: 1, wantKnown: true,
			wantErr: `unknown kind "widget": this build reads mutation, version, chunk, rejected`},
		{header: "mutation/v2", kind: KindMutation, major: 2, wantKnown: true,
			wantErr: `canon-schema header "mutation/v2": this build reads mutation/v1 only: the record was written by a newer Canon; upgrade this reader`},
		{header: "chunk/v12", kind: KindChunk, major: 12, wantKnown: true, wantErr: `this build reads chunk/v1 only`},
	}
	for _, tt := range tests {
		kind, major, err := ParseSchema(tt.header)
		if tt.wantErr == "" {
			if err != nil || kind != tt.kind || major != tt.major {
				t.Errorf("ParseSchema(%q) = %q, %d, %v; want %q, %d", tt.header, kind, major, err, tt.kind, tt.major)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseSchema(%q) error = %v; want it to contain %q", tt.header, err, tt.wantErr)
		}
		if !errors.Is(err, ErrUnknownSchema) {
			t.Errorf("ParseSchema(%q) error %v is not ErrUnknownSchema", tt.header, err)
		}
		if tt.wantKnown && (kind != tt.kind || major != tt.major) || !tt.wantKnown && (kind != "" || major != 0) {
			t.Errorf("ParseSchema(%q) = %q, %d with the error; want %q, %d", tt.header, kind, major, tt.kind, tt.major)
		}
	}
}

func TestDecodersCheckTheSchemaHeader(t *testing.T) {
	m, _ := EncodeMutation(testMutation(), Limits{})
	tests := []struct {
		name    string
		decode  func() error
		wantErr string
	}{
		{"mutation as version", func() error { _, err := DecodeVersion(SchemaMutationV1, m, Limits{}); return err },
			`canon-schema header "mutation/v1" is not a version record`},
		{"version as mutation", func() error { _, err := DecodeMutation(SchemaVersionV1, m, Limits{}); return err },
			`"version/v1" is not a mutation record`},
		{"mutation v2", func() error { _, err := DecodeMutation("mutation/v2", m, Limits{}); return err },
			`this build reads mutation/v1 only`},
		{"no header", func() error { _, err := DecodeRejected("", m, Limits{}); return err },
			`no canon-schema header`},
		{"chunk as mutation", func() error {
			_, err := DecodeChunk(SchemaMutationV1, hashA, []byte("acme/roadmap"), m, Limits{})
			return err
		}, `"mutation/v1" is not a chunk record`},
	}
	for _, tt := range tests {
		err := tt.decode()
		if !errors.Is(err, ErrUnknownSchema) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v; want ErrUnknownSchema containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// Every size limit: the error is ErrTooLarge, names the field and gives
// the size and the limit.
func TestLimits(t *testing.T) {
	small := Limits{MaxScalarsBytes: 40, MaxMetaBytes: 16, MaxDataBytes: 100, MaxArgsBytes: 32, MaxMutationBytes: 400, MaxChunkBytes: 8}
	mutation := func(f func(*Mutation)) func() error {
		return func() error {
			m := testMutation()
			f(m)
			b, err := EncodeMutation(m, DefaultLimits())
			if err != nil {
				return err
			}
			_, err = DecodeMutation(SchemaMutationV1, b, small)
			return err
		}
	}
	version := func(f func(*Version)) func() error {
		return func() error {
			v := testVersion()
			f(v)
			b, err := EncodeVersion(v, DefaultLimits())
			if err != nil {
				return err
			}
			_, err = DecodeVersion(SchemaVersionV1, b, small)
			return err
		}
	}
	tests := []struct {
		name      string
		run       func() error
		wantField string
		wantErr   string
	}{
		{"args", mutation(func(m *Mutation) { m.Args = json.RawMessage(`"` + strings.Repeat("a", 31) + `"`) }),
			"args", "too large: 33 bytes, over the limit of 32 bytes (MaxArgsBytes)"},
		{"args at the limit", mutation(func(m *Mutation) { m.Args = json.RawMessage(`"` + strings.Repeat("a", 30) + `"`) }), "", ""},
		{"whole mutation", mutation(func(m *Mutation) { m.Principal = strings.Repeat("p", 256) }),
			"", "mutation/v1: too large: the value is 442 bytes, over the limit of 400 bytes (MaxMutationBytes)"},
		{"meta", version(func(v *Version) { v.Items[0].Meta = json.RawMessage(`{"title":"xxxxxx"}`) }),
			"items[0].meta", "too large: 18 bytes, over the limit of 16 bytes (MaxMetaBytes)"},
		{"meta at the limit", version(func(v *Version) { v.Items[0].Meta = json.RawMessage(`{"title":"xxxx"}`) }), "", ""},
		{"item size", version(func(v *Version) { v.Items[0].Size = 101 }),
			"items[0].size", "too large: 101 bytes, over the limit of 100 bytes (MaxDataBytes)"},
		// {"name":"Roadmap","x":1e20} is 29 bytes as written, but 44 in
		// canonical form, where 1e20 is written with 21 digits.
		{"scalars canonical", version(func(v *Version) {
			v.Scalars["x"] = json.RawMessage(`1e20`)
		}), "scalars", "too large: 44 bytes of canonical JSON, over the limit of 40 bytes (MaxScalarsBytes)"},
		{"scalars at the limit", version(func(v *Version) { v.Scalars["x"] = json.RawMessage(`"` + strings.Repeat("s", 14) + `"`) }), "", ""},
		{"outcome args", version(func(v *Version) { v.Mutations[0].Args = json.RawMessage(`[` + strings.Repeat("1,", 20) + `1]`) }),
			"mutations[0].args", "too large: 43 bytes, over the limit of 32 bytes (MaxArgsBytes)"},
		{"chunk", func() error {
			v, h := EncodeChunk(&Chunk{Data: []byte("123456789")})
			_, err := DecodeChunk(SchemaChunkV1, h, []byte("acme/roadmap"), v, small)
			return err
		}, "value", "too large: 9 bytes, over the limit of 8 bytes (MaxChunkBytes)"},
		{"rejected value", func() error {
			_, err := EncodeRejected(&Rejected{Reason: ReasonUndecodable, Message: "m", Topic: TopicMutations,
				Value: make([]byte, MaxRejectedValueBytes+1)}, small)
			return err
		}, "value", "too large: 16385 bytes, over the limit of 16384 bytes"},
		{"rejected mutation args", func() error {
			m := testMutation()
			m.Args = json.RawMessage(`"` + strings.Repeat("a", 40) + `"`)
			_, err := EncodeRejected(&Rejected{Reason: ReasonKeyMismatch, Message: "m", Topic: TopicMutations, Mutation: m}, small)
			return err
		}, "mutation.args", "too large: 42 bytes, over the limit of 32 bytes (MaxArgsBytes)"},
	}
	for _, tt := range tests {
		err := tt.run()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v\nwant ErrTooLarge containing %q", tt.name, err, tt.wantErr)
			continue
		}
		var fe *FieldError
		if errors.As(err, &fe) != (tt.wantField != "") || fe != nil && fe.Field != tt.wantField {
			t.Errorf("%s: field error = %+v, want field %q", tt.name, fe, tt.wantField)
		}
		if got := RejectReason(err); got != ReasonTooLarge {
			t.Errorf("%s: RejectReason = %q, want %q", tt.name, got, ReasonTooLarge)
		}
	}
}

// The scalars' size is the length of their canonical JSON, computed
// without canonicalizing the whole object.
func TestScalarsSizeIsCanonical(t *testing.T) {
	for _, sc := range []map[string]json.RawMessage{
		{},
		{"a": json.RawMessage(`1`)},
		{"name": json.RawMessage(`"Roadmap"`), "x": json.RawMessage(`1e20`)},
		{"b": json.RawMessage(`{ "z": [1.50, -0, "\u00e9\n"], "a": null }`), "a": json.RawMessage(`"<>&\/"`), "c": json.RawMessage(`-12`)},
		{"big": json.RawMessage(`12345678901234567890`), "neg0": json.RawMessage(`-0`), "f": json.RawMessage(`0.1`), "t": json.RawMessage(`true`)},
	} {
		raw, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		want := len(canonical(t, raw))
		if err := validateScalars(sc, Limits{MaxScalarsBytes: want}); err != nil {
			t.Errorf("%s: canonical size %d: %v", raw, want, err)
		}
		if err := validateScalars(sc, Limits{MaxScalarsBytes: want - 1}); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: limit %d: err = %v, want ErrTooLarge", raw, want-1, err)
		}
	}
}

func TestZeroLimitsAreDefaults(t *testing.T) {
	m := testMutation()
	m.Args = json.RawMessage(`"` + strings.Repeat("a", 1<<20) + `"`)
	b, err := EncodeMutation(m, Limits{})
	if err != nil {
		t.Fatalf("1 MiB args with zero Limits: %v", err)
	}
	if _, err := DecodeMutation(SchemaMutationV1, b, Limits{MaxArgsBytes: 1 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("args over an explicit limit: err = %v, want ErrTooLarge", err)
	}
}

func TestRejectReason(t *testing.T) {
	decodeErr := func(schema, value string) error {
		_, err := DecodeMutation(schema, []byte(value), Limits{})
		return err
	}
	valid, _ := EncodeMutation(testMutation(), Limits{})
	tests := []struct {
		err  error
		want string
	}{
		{decodeErr("", string(valid)), ReasonUnknownSchema},
		{decodeErr("mutation/v3", string(valid)), ReasonUnknownSchema},
		{decodeErr(SchemaMutationV1, `{"org":`), ReasonUndecodable},
		{decodeErr(SchemaMutationV1, `"org"`), ReasonUndecodable},
		{decodeErr(SchemaMutationV1, strings.Replace(string(valid), `"id":7`, `"id":0`, 1)), ReasonInvalid},
		{decodeErr(SchemaMutationV1, string(valid)+strings.Repeat(" ", 2<<20)), ReasonTooLarge},
		{errors.New("something else"), ReasonInvalid},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Fatalf("want an error for %q", tt.want)
		}
		if got := RejectReason(tt.err); got != tt.want {
			t.Errorf("RejectReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestDecodeMutationRules(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		wantErr string // "" for success
		check   func(*Mutation) bool
	}{
		{"unknown members are ignored",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":{},"future":{"x":[1,2]},"ID":9}`,
			"", func(m *Mutation) bool { return m.ID == 1 }},
		{"member names match exactly, not case-insensitively",
			`{"ORG":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":{}}`,
			`field "org": is required but missing`, nil},
		{"escaped member names",
			`{"\u006frg":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":{}}`,
			"", func(m *Mutation) bool { return m.Org == "acme" }},
		{"escaped strings",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c\u00e9\"","id":1,"name":"n","args":{}}`,
			"", func(m *Mutation) bool { return m.Client == `cé"` }},
		{"args are compacted",
			"{\"org\":\"acme\",\"project\":\"roadmap\",\"branch\":\"main\",\"clientGroup\":\"g\",\"client\":\"c\",\"id\":1,\"name\":\"n\",\"args\": { \"a\" : [ 1 , \"b c\" ]\n}}",
			"", func(m *Mutation) bool { return string(m.Args) == `{"a":[1,"b c"]}` }},
		{"null args are no args",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":null}`,
			"", func(m *Mutation) bool { return string(m.Args) == "null" }},
		{"whitespace around the object",
			" \n{\"org\":\"acme\",\"project\":\"roadmap\",\"branch\":\"main\",\"clientGroup\":\"g\",\"client\":\"c\",\"id\":1,\"name\":\"n\",\"args\":1}\t\n",
			"", func(m *Mutation) bool { return string(m.Args) == "1" }},
		{"-0 is not an id",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":-0,"name":"n","args":1}`,
			`field "id": must be an integer >= 1, got -0`, nil},
		{"id true",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":true,"name":"n","args":1}`,
			`field "id": must be an integer >= 1, got true`, nil},
		{"ts over int64",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":1,"ts":9223372036854775808}`,
			`field "ts": must be an integer >= 0, got 9223372036854775808`, nil},
		{"nested objects hide their members",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":{"id":0,"org":{"}":"]"}}}`,
			"", func(m *Mutation) bool { return m.ID == 1 && m.Org == "acme" }},
		{"invalid UTF-8",
			"{\"org\":\"acme\",\"project\":\"roadmap\",\"branch\":\"main\",\"clientGroup\":\"g\",\"client\":\"c\xff\",\"id\":1,\"name\":\"n\",\"args\":1}",
			"undecodable: the value is not valid UTF-8 (at byte 79)", nil},
		{"an escaped lone surrogate becomes U+FFFD, as in encoding/json",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c\ud800","id":1,"name":"n","args":1}`,
			"", func(m *Mutation) bool { return m.Client == "c\uFFFD" }},
		{"principal too long",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":1,"principal":"` + strings.Repeat("p", 257) + `"}`,
			`field "principal": is 257 bytes long, over the limit of 256`, nil},
		{"deeply nested args are JSON too",
			`{"org":"acme","project":"roadmap","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
			"the value is not valid JSON: invalid character '[' exceeded max depth", nil},
	}
	for _, tt := range tests {
		m, err := DecodeMutation(SchemaMutationV1, []byte(tt.value), DefaultLimits())
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error = %v, want it to contain %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !tt.check(m) {
			t.Errorf("%s: decoded %+v", tt.name, m)
		}
	}
}

func TestDecodedRecordsDoNotAliasTheValue(t *testing.T) {
	value, err := EncodeMutation(testMutation(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMutation(SchemaMutationV1, value, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := string(m.Args)
	for i := range value {
		value[i] = ' '
	}
	if string(m.Args) != want || m.Org != "acme" {
		t.Fatalf("decoded mutation changed with the value's buffer: %+v", m)
	}
}

func TestEncodeValidates(t *testing.T) {
	tests := []struct {
		name    string
		encode  func() error
		wantErr string
	}{
		{"mutation without org", func() error {
			m := testMutation()
			m.Org = ""
			_, err := EncodeMutation(m, Limits{})
			return err
		}, `encode mutation/v1: field "org": "" is not a valid name`},
		{"mutation with args that are not JSON", func() error {
			m := testMutation()
			m.Args = json.RawMessage(`{"a":`)
			_, err := EncodeMutation(m, Limits{})
			return err
		}, `field "args": is not valid JSON: {"a":`},
		{"version with unsorted items", func() error {
			v := testVersion()
			v.Items[0], v.Items[1] = v.Items[1], v.Items[0]
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "items[1]": ("tasks", "t-1") does not come after items[0] ("tasks", "t-2")`},
		{"version with a scalar that is not JSON", func() error {
			v := testVersion()
			v.Scalars["bad"] = json.RawMessage(`{`)
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "scalars.bad": is not JSON that RFC 8785 can canonicalize`},
		{"version with a bad outcome", func() error {
			v := testVersion()
			v.Mutations[0].Args = json.RawMessage(`nope`)
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "mutations[0].args": is not valid JSON`},
		{"version without mutations", func() error {
			v := testVersion()
			v.Mutations = nil
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "mutations": is empty`},
		{"lastIds report the first bad client by name", func() error {
			v := testVersion()
			v.LastIDs = map[string]uint64{"z": 0, "c-1": 7, "b": 0, "y": 0}
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "lastIds.b": must be an integer >= 1, got 0`},
		{"scalars report the first bad name by name", func() error {
			v := testVersion()
			v.Scalars = map[string]json.RawMessage{"_z": json.RawMessage(`1`), "ok": json.RawMessage(`1`), "_a": json.RawMessage(`1`)}
			_, err := EncodeVersion(v, Limits{})
			return err
		}, `field "scalars._a": "_a" is not a valid scalar name`},
		{"rejected gap without expected id", func() error {
			_, err := EncodeRejected(&Rejected{Reason: ReasonGap, Message: "m", Topic: TopicMutations}, Limits{})
			return err
		}, `encode rejected/v1: field "expectedId": is required when reason is "gap"`},
		{"rejected with a topic of dots", func() error {
			_, err := EncodeRejected(&Rejected{Reason: ReasonInvalid, Message: "m", Topic: ".."}, Limits{})
			return err
		}, `field "topic": ".." is not a Kafka topic name`},
	}
	for _, tt := range tests {
		err := tt.encode()
		var fe *FieldError
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &fe) {
			t.Errorf("%s: error = %v, want a *FieldError containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestEncodeShape(t *testing.T) {
	m := testMutation()
	m.Args = nil
	m.TS = 0
	b, err := EncodeMutation(m, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"org":"acme","project":"roadmap","branch":"main","clientGroup":"cg-1","client":"c-1","id":7,"name":"item.put","args":null}`
	if string(b) != want {
		t.Errorf("EncodeMutation = %s\nwant %s", b, want)
	}

	v := testVersion()
	v.Scalars, v.Items, v.LastIDs = nil, nil, nil
	v.Mutations[0].Args = nil
	b, err = EncodeVersion(v, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"scalars":{}`, `"items":[]`, `"lastIds":{}`, `"args":null`} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("EncodeVersion = %s\nwant it to contain %s", b, s)
		}
	}
	if v.Mutations[0].Args != nil {
		t.Error("EncodeVersion changed its argument")
	}

	// Canon's records are read by programs: no HTML escaping, and raw
	// JSON (args, meta) is written byte for byte, U+2028 included, so
	// that canonical meta stays canonical.
	m = testMutation()
	m.Args = json.RawMessage("\"<a&b>\u2028\"")
	m.Principal = "<p>"
	b, _ = EncodeMutation(m, Limits{})
	if !bytes.Contains(b, []byte("\"args\":\"<a&b>\u2028\"")) || !bytes.Contains(b, []byte(`"principal":"<p>"`)) {
		t.Errorf("EncodeMutation escaped HTML: %s", b)
	}
	v = testVersion()
	v.Items[0].Meta = json.RawMessage("{\"t\":\"<&>\u2028\"}")
	b, err = EncodeVersion(v, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := DecodeVersion(SchemaVersionV1, b, Limits{}); err != nil || !bytes.Equal(d.Items[0].Meta, v.Items[0].Meta) {
		t.Errorf("meta after a round trip = %s, %v; want %s", d.Items[0].Meta, err, v.Items[0].Meta)
	}
}

func TestChunkRoundTrip(t *testing.T) {
	c := &Chunk{Org: "acme", Project: "roadmap", Hash: "ignored", Data: []byte(`{"a":1}`)}
	value, hash := EncodeChunk(c)
	got, err := DecodeChunk(SchemaChunkV1, hash, ProjectKey(c.Org, c.Project), value, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Org != "acme" || got.Project != "roadmap" || got.Hash != "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862" || string(got.Data) != `{"a":1}` {
		t.Fatalf("DecodeChunk = %+v", got)
	}
}

func TestParseProjectKey(t *testing.T) {
	tests := []struct {
		key, org, project, wantErr string
	}{
		{key: "acme/roadmap", org: "acme", project: "roadmap"},
		{key: "org-1/project_42", org: "org-1", project: "project_42"},
		{key: "acme", wantErr: `field "key": "acme" is not a project key: want "org/project"`},
		{key: "", wantErr: `"" is not a project key`},
		{key: "/roadmap", wantErr: `org of record key: field "key": "" is not a valid name`},
		{key: "acme/", wantErr: `project of record key: field "key": "" is not a valid name`},
		{key: "acme/road/map", wantErr: `project of record key: field "key": "road/map" is not a valid name`},
		{key: "Acme/roadmap", wantErr: `"Acme" is not a valid name`},
	}
	for _, tt := range tests {
		org, project, err := ParseProjectKey([]byte(tt.key))
		if tt.wantErr == "" {
			if err != nil || org != tt.org || project != tt.project {
				t.Errorf("ParseProjectKey(%q) = %q, %q, %v", tt.key, org, project, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseProjectKey(%q) error = %v, want it to contain %q", tt.key, err, tt.wantErr)
		}
	}
}

func TestJSONSchemaLookup(t *testing.T) {
	for _, s := range []string{SchemaMutationV1, SchemaVersionV1, SchemaRejectedV1} {
		doc, ok := JSONSchema(s)
		if !ok || !json.Valid(doc) {
			t.Errorf("JSONSchema(%q) = %d bytes, %v", s, len(doc), ok)
		}
	}
	for _, s := range []string{SchemaChunkV1, "mutation/v2", ""} {
		if _, ok := JSONSchema(s); ok {
			t.Errorf("JSONSchema(%q) is ok, want none", s)
		}
	}
}

func BenchmarkDecodeMutation(b *testing.B) {
	value := readFile(b, "testdata/mutation/valid/item_put.json")
	value, _ = EncodeMutation(must(DecodeMutation(SchemaMutationV1, value, Limits{})), Limits{}) // compact, as producers write it
	l := DefaultLimits()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMutation(SchemaMutationV1, value, l); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeMutation(b *testing.B) {
	m := must(DecodeMutation(SchemaMutationV1, readFile(b, "testdata/mutation/valid/item_put.json"), Limits{}))
	l := DefaultLimits()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeMutation(m, l); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeVersion(b *testing.B) {
	value := readFile(b, "testdata/version/valid/puts_delete_two_mutations.json")
	value, _ = EncodeVersion(must(DecodeVersion(SchemaVersionV1, value, Limits{})), Limits{})
	l := DefaultLimits()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeVersion(SchemaVersionV1, value, l); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeVersion(b *testing.B) {
	v := must(DecodeVersion(SchemaVersionV1, readFile(b, "testdata/version/valid/puts_delete_two_mutations.json"), Limits{}))
	l := DefaultLimits()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeVersion(v, l); err != nil {
			b.Fatal(err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestValidateMethods(t *testing.T) {
	gap := &Rejected{Reason: ReasonGap, Message: "resend from 7", Topic: TopicMutations, Partition: 1, Offset: 9, Mutation: testMutation(), ExpectedID: 7, At: 1}
	gap.Mutation.Args = nil // written as null
	if err := testMutation().Validate(Limits{}); err != nil {
		t.Errorf("Mutation.Validate: %v", err)
	}
	if err := testVersion().Validate(Limits{}); err != nil {
		t.Errorf("Version.Validate: %v", err)
	}
	if err := gap.Validate(Limits{}); err != nil {
		t.Errorf("Rejected.Validate: %v", err)
	}
	b, err := EncodeRejected(gap, Limits{})
	if err != nil || !bytes.Contains(b, []byte(`"args":null`)) || gap.Mutation.Args != nil {
		t.Errorf("EncodeRejected = %s, %v; want null args, argument unchanged", b, err)
	}

	m := testMutation()
	m.Branch = "feature/x"
	v := testVersion()
	v.Items[0].Collection = "a b"
	v.Mutations[0].Status = StatusError
	r := *gap
	r.Mutation = testMutation()
	r.Mutation.ClientGroup = ""
	for _, tt := range []struct {
		err       error
		wantField string
	}{
		{m.Validate(Limits{}), "branch"},
		{v.Validate(Limits{}), "items[0].collection"},
		{r.Validate(Limits{}), "mutation.clientGroup"},
	} {
		var fe *FieldError
		if !errors.As(tt.err, &fe) || fe.Field != tt.wantField {
			t.Errorf("error = %v, want a *FieldError about %q", tt.err, tt.wantField)
		}
	}
}

// Args that are not UTF-8 make a record the decoder refuses
// (undecodable): the encoder refuses them, naming the field.
func TestEncodeMutationArgsNotUTF8(t *testing.T) {
	m := testMutation()
	m.Args = []byte("{\"text\":\"\xff\"}")
	for _, encode := range []func(*Mutation, Limits) ([]byte, error){EncodeMutation, EncodeCheckedMutation} {
		_, err := encode(m, Limits{})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "args" || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("encode args with a byte that is not UTF-8: %v, want an error on field args", err)
		}
	}
}

// The optional members of analysts' history (decidedAt, an error's code,
// a job's lineage) round-trip; records without them decode as before.
func TestAnalystsFieldsRoundTrip(t *testing.T) {
	job := &Job{Kind: "rebase", Principal: "user:ann", At: 1767225700000}
	origin := &Origin{Branch: "main", Version: 4, Client: "c-9", ID: 3}
	v := testVersion()
	v.DecidedAt = 1767225600250
	v.Mutations[0].Job, v.Mutations[0].Origin = job, origin
	v.Mutations = append(v.Mutations, Outcome{ClientGroup: "cg-1", Client: "c-1", ID: 8, Name: "item.patch", Args: json.RawMessage(`{}`),
		Status: StatusError, Error: "item tasks/t-9: not found", Code: "not_found", Offset: 42})
	v.LastIDs["c-1"] = 8
	b, err := EncodeVersion(v, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeVersion(SchemaVersionV1, b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got.DecidedAt != v.DecidedAt || got.Mutations[1].Code != "not_found" || *got.Mutations[0].Job != *job || *got.Mutations[0].Origin != *origin {
		t.Fatalf("decoded %+v from %s", got, b)
	}

	m := &Mutation{Org: "acme", Project: "roadmap", Branch: "b2", ClientGroup: "g", Client: "c-9", ID: 1, Name: "item.put",
		Args: json.RawMessage(`{}`), Job: job, Origin: origin}
	mb, err := EncodeMutation(m, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := marshal(m); string(mb) != string(want) {
		t.Fatalf("EncodeMutation wrote\n%s\nencoding/json writes\n%s", mb, want)
	}
	gm, err := DecodeMutation(SchemaMutationV1, mb, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if *gm.Job != *job || *gm.Origin != *origin {
		t.Fatalf("decoded %+v from %s", gm, mb)
	}

	old := testVersion()
	ob, err := EncodeVersion(old, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ob), "decidedAt") || strings.Contains(string(ob), "code") || strings.Contains(string(ob), "origin") {
		t.Fatalf("a version without the optional members wrote them: %s", ob)
	}
	bad := *v
	bad.Mutations = append([]Outcome(nil), v.Mutations...)
	bad.Mutations[0].Code = "not_found" // an applied mutation has no code
	if _, err := EncodeVersion(&bad, Limits{}); err == nil || !strings.Contains(err.Error(), "code") {
		t.Fatalf("EncodeVersion of an applied outcome with a code = %v, want an error naming code", err)
	}
}

// TestDecodeFirstFaultInDeclarationOrder checks that a record with
// several faults reports the same one whatever the order of its members:
// a member that appears twice, then the members in declaration order,
// then what is inside them.
func TestDecodeFirstFaultInDeclarationOrder(t *testing.T) {
	for _, c := range []struct {
		value, want string
	}{
		{`{"id":"7","org":5}`, `field "org": must be a string, got 5`},
		{`{"job":{"kind":1},"org":5}`, `field "org": must be a string, got 5`},
		{`{"job":{"kind":1,"kind":2},"org":"acme","org":"acme"}`, `field "org": appears more than once: keep one`},
		{`{"origin":[],"job":{"kind":1}}`, `field "org": is required but missing`},
		{`{"org":"acme","project":"p","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":null,"origin":{"id":1,"id":2},"job":{"at":"x"}}`,
			`field "job.kind": is required but missing`},
		{`{"org":"acme","project":"p","branch":"main","clientGroup":"g","client":"c","id":1,"name":"n","args":null,"job":{"at":"x","kind":"k","kind":"k"}}`,
			`field "job.kind": appears more than once: keep one`},
	} {
		_, err := DecodeMutation(SchemaMutationV1, []byte(c.value), Limits{})
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("DecodeMutation(%s) = %v, want ...%s", c.value, err, c.want)
		}
	}
	for _, c := range []struct {
		value, want string
	}{
		{`{"mutations":[{"id":0}],"items":[{"op":1}],"version":"1","org":"a","project":"p","branch":"b"}`, `field "version": must be an integer >= 1, got string "1"`},
		{`{"org":"a","project":"p","branch":"b","version":1,"parent":0,"ts":1,"scalars":{},"mutations":[{"id":0}],"items":[3,{"op":1}]}`,
			`field "items[0]": must be an object, got 3`},
		{`{"org":"a","project":"p","branch":"b","version":1,"parent":0,"ts":1,"scalars":{},"items":[{"chunks":[1]}],"mutations":[]}`,
			`field "items[0].collection": is required but missing`},
	} {
		_, err := DecodeVersion(SchemaVersionV1, []byte(c.value), Limits{})
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("DecodeVersion(%s) = %v, want ...%s", c.value, err, c.want)
		}
	}
	// A syntax error anywhere comes before any of these.
	if _, err := DecodeMutation(SchemaMutationV1, []byte(`{"org":5,"id":1,}`), Limits{}); !errors.Is(err, ErrUndecodable) {
		t.Errorf("DecodeMutation of invalid JSON = %v, want ErrUndecodable", err)
	}
}
