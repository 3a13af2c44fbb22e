package wire

// DeployResponse answers a mutator bundle deploy once Kafka acknowledged
// its deploy record(s): one for a project deploy, one per partition for
// an org deploy. The sequencer activates the bundle at each record's
// position; ActiveBundle tells when it did.
type DeployResponse struct {
	Org string `json:"org"`
	// Project is absent for an org deploy.
	Project string `json:"project,omitempty"`
	// Hash is the bundle hash: the SHA-256 of the deployed bytes.
	Hash string `json:"hash"`
	// Names are the bundle's mutators, sorted.
	Names   []string         `json:"names"`
	Written []DeployedRecord `json:"written"`
}

// DeployedRecord is where Kafka acknowledged one deploy record.
type DeployedRecord struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// ActiveBundle is the mutator bundle that decides a project's mutations
// from the project's current position on.
type ActiveBundle struct {
	Org string `json:"org"`
	// Project is the project asked about; Scope says whether the bundle
	// is the project's own deploy ("project") or its org's ("org").
	Project string `json:"project"`
	Scope   string `json:"scope"`
	Hash    string `json:"hash"`
	// Principal deployed it at DeployedAt (ms); the sequencer activated
	// it at ActivatedAt (ms), at Source in canon.mutations.
	Principal   string         `json:"principal,omitempty"`
	DeployedAt  int64          `json:"deployedAt"`
	ActivatedAt int64          `json:"activatedAt"`
	Source      DeployedRecord `json:"source"`
}

// Scopes of an ActiveBundle.
const (
	ScopeProject = "project"
	ScopeOrg     = "org"
)
