package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// SchemaDeployV1 is the schema of a mutator bundle deploy: in
// canon.mutations the request to activate a bundle, in canon.versions the
// sequencer's record that it did (with Source set).
const SchemaDeployV1 = "deploy/v1"

// KindDeploy is the kind of deploy/v1 records.
const KindDeploy = "deploy"

// MaxBundleBytes bounds a mutator bundle's source. A deploy record holds
// the whole bundle, and must stay well below the topics'
// max.message.bytes (4 MiB).
const MaxBundleBytes = 1 << 20

// Deploy activates a mutator bundle for one project or for every project
// of an org. It is a deploy/v1 record twice:
//
//   - in canon.mutations, keyed by DeployKey(Org, Project): written by the
//     ingest to the project's partition for a project deploy, and to every
//     partition for an org deploy. The sequencer decides it in order with
//     the mutations of its partition: the mutations after it are decided
//     with the bundle, the ones before it with the bundle active before.
//   - in canon.versions, in the transaction that decided it, with Source
//     set to the position of the deploy in canon.mutations: the
//     activation, from which every store learns the partition's active
//     bundles.
//
// A project deploy overrides its org's deploy; the built-in mutators stay
// available under their names.
type Deploy struct {
	Org string `json:"org"`
	// Project is empty for an org deploy.
	Project string `json:"project,omitempty"`
	// Hash is the SHA-256 of Bundle in lower-case hex: the bundle hash
	// that version records name.
	Hash string `json:"hash"`
	// Bundle is the JavaScript module (UTF-8), at most MaxBundleBytes.
	Bundle string `json:"bundle"`
	// Principal is who deployed it; DeployedAt when (ms), stamped by the
	// ingest.
	Principal  string `json:"principal,omitempty"`
	DeployedAt int64  `json:"deployedAt"`
	// Source is set in canon.versions only: the position of the deploy
	// record in canon.mutations, its activation point in the partition.
	Source *SourceRef `json:"source,omitempty"`
	// ActivatedAt is the Kafka timestamp of the deploy record in
	// canon.mutations (ms), set with Source.
	ActivatedAt int64 `json:"activatedAt,omitempty"`
}

// DeployKey is the record key of a deploy: the project key for a project
// deploy, the org alone for an org deploy (whose records are written to
// every partition explicitly).
func DeployKey(org, project string) []byte {
	if project == "" {
		return []byte(org)
	}
	return ProjectKey(org, project)
}

// BundleHash returns the bundle hash of a bundle's bytes: their SHA-256
// in lower-case hex.
func BundleHash(bundle []byte) string {
	sum := sha256.Sum256(bundle)
	return hex.EncodeToString(sum[:])
}

// Validate checks a deploy as EncodeDeploy does.
func (d *Deploy) Validate() error { return validateDeploy(d) }

func validateDeploy(d *Deploy) error {
	if err := ValidateOrg("org", d.Org); err != nil {
		return err
	}
	if d.Project != "" {
		if err := ValidateProject("project", d.Project); err != nil {
			return err
		}
	}
	if len(d.Bundle) > MaxBundleBytes {
		return tooLarge("bundle", len(d.Bundle), MaxBundleBytes, "MaxBundleBytes")
	}
	if d.Bundle == "" {
		return &FieldError{Field: "bundle", Reason: "is empty: a bundle is a JavaScript module with a default export of mutators"}
	}
	if !utf8.ValidString(d.Bundle) {
		return &FieldError{Field: "bundle", Reason: "is not valid UTF-8: a bundle is JavaScript source text"}
	}
	if err := ValidateHash("hash", d.Hash); err != nil {
		return err
	}
	if h := BundleHash([]byte(d.Bundle)); h != d.Hash {
		return &FieldError{Field: "hash", Reason: fmt.Sprintf("is %s but the bundle's SHA-256 is %s", d.Hash, h)}
	}
	if d.DeployedAt < 0 {
		return &FieldError{Field: "deployedAt", Reason: "is negative: want milliseconds since the epoch"}
	}
	if d.Source != nil && (d.Source.Partition < 0 || d.Source.Offset < 0) {
		return &FieldError{Field: "source", Reason: "partition and offset must be >= 0"}
	}
	if d.ActivatedAt < 0 {
		return &FieldError{Field: "activatedAt", Reason: "is negative: want milliseconds since the epoch"}
	}
	if d.Principal != "" && len(d.Principal) > MaxClientBytes {
		return &FieldError{Field: "principal", Reason: fmt.Sprintf("is %d bytes long, over the limit of %d", len(d.Principal), MaxClientBytes)}
	}
	return nil
}

// EncodeDeploy validates d and returns the value of its deploy/v1 record.
func EncodeDeploy(d *Deploy) ([]byte, error) {
	if err := validateDeploy(d); err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaDeployV1, err)
	}
	b, err := marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaDeployV1, err)
	}
	return b, nil
}

// DecodeDeploy decodes and validates the value of a deploy record whose
// canon-schema header is schema. Members it does not know are ignored.
func DecodeDeploy(schema string, value []byte) (*Deploy, error) {
	if err := expectSchema(schema, KindDeploy); err != nil {
		return nil, err
	}
	if len(value) > MaxBundleBytes+64<<10 {
		return nil, fmt.Errorf("%s: %w", schema, tooLarge("value", len(value), MaxBundleBytes+64<<10, "MaxBundleBytes"))
	}
	// Required members, and their JSON types, before the struct decode
	// that would take a missing one as its zero value.
	var members map[string]json.RawMessage
	if err := readObject(schema, value, func(d []byte, at, depth int) (int, bool) {
		end, _ := CheckJSONValue(d, at, depth)
		return end, end >= 0
	}); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(value, &members); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", schema, ErrUndecodable, err)
	}
	for _, f := range []string{"org", "hash", "bundle", "deployedAt"} {
		if _, ok := members[f]; !ok {
			return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: f, Reason: "is missing"})
		}
	}
	if src, ok := members["source"]; ok {
		var sm map[string]json.RawMessage
		if json.Unmarshal(src, &sm) != nil || sm == nil {
			return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: "source", Reason: "must be a JSON object {partition, offset}"})
		}
		for _, f := range []string{"partition", "offset"} {
			if _, ok := sm[f]; !ok {
				return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: "source." + f, Reason: "is missing"})
			}
		}
	}
	d := new(Deploy)
	if err := json.Unmarshal(value, d); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%s: %w", schema, &FieldError{Field: te.Field, Reason: fmt.Sprintf("must be a JSON %s, got %s", jsonTypeName(te.Type.Kind().String()), te.Value)})
		}
		return nil, fmt.Errorf("%s: %w: %w", schema, ErrUndecodable, err)
	}
	if err := validateDeploy(d); err != nil {
		return nil, fmt.Errorf("%s: %w", schema, err)
	}
	return d, nil
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "int64", "int32", "int", "uint64":
		return "integer"
	case "ptr", "struct":
		return "object"
	}
	return goKind
}
