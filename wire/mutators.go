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

// Deployments answers GET /v1/orgs/{org}/mutators: which scopes of the
// org have which bundle, as of the store of the instance that answers.
// An instance holds some partitions: Partitions are those the answer
// covers (a project of another partition is not listed, and an org
// deploy is listed with the covered partitions that run it).
type Deployments struct {
	Org         string       `json:"org"`
	Partitions  []int32      `json:"partitions"`
	Deployments []Deployment `json:"deployments"`
}

// Deployment is a bundle deployed for one scope: the org (Project
// absent) or one of its projects.
type Deployment struct {
	Scope string `json:"scope"`
	// Project is absent for the org's deploy.
	Project    string `json:"project,omitempty"`
	Hash       string `json:"hash"`
	Principal  string `json:"principal,omitempty"`
	DeployedAt int64  `json:"deployedAt"`
	// Partitions are where the bundle is active: the project's, or the
	// covered partitions where the org deploy was activated (an org
	// deploy writes one record per partition, each activated in its
	// partition's order).
	Partitions []int32 `json:"partitions"`
}
