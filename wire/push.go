package wire

import "encoding/json"

// PushRequest is the body of POST /v1/projects/{org}/{project}/push:
// mutations of one client group on one branch of a project.
type PushRequest struct {
	// Branch defaults to main.
	Branch      string         `json:"branch,omitempty"`
	ClientGroup string         `json:"clientGroup"`
	Mutations   []PushMutation `json:"mutations"`
}

// PushMutation is one mutation of a push.
type PushMutation struct {
	Client string `json:"client"`
	ID     uint64 `json:"id"`
	Name   string `json:"name"`
	// Args are the mutator's arguments; absent or nil is null.
	Args json.RawMessage `json:"args"`
	// TS is the client's clock in milliseconds; optional.
	TS int64 `json:"ts,omitempty"`
}

// PushResponse answers a push once Kafka acknowledged every mutation.
// With ?wait=applied it also has each mutation's outcome, in order.
type PushResponse struct {
	Mutations []Written `json:"mutations"`
	Outcomes  []Outcome `json:"outcomes,omitempty"`
}

// Written is where Kafka acknowledged one pushed mutation.
type Written struct {
	Client    string `json:"client"`
	ID        uint64 `json:"id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Outcome statuses of a waited-for mutation (?wait=applied).
const (
	OutcomeApplied   = "applied"   // in Version, the mutator succeeded
	OutcomeError     = "error"     // in Version, with the mutator's Error; the id is used
	OutcomeDuplicate = "duplicate" // id <= the client's last id: skipped
	OutcomeRejected  = "rejected"  // not recorded: Reason (gap, unauthorized, invalid …), Message, ExpectedID
	OutcomeTimeout   = "timeout"   // written, not decided within the wait
)

// Outcome is what became of one pushed mutation.
type Outcome struct {
	Written
	Status string `json:"status"`
	// Branch and Version are the version that recorded the mutation
	// (applied or error).
	Branch  string `json:"branch,omitempty"`
	Version uint64 `json:"version,omitempty"`
	// Error is the mutator's error (status error).
	Error string `json:"error,omitempty"`
	// Code is the stable code of Error (status error), such as
	// mutator_error, unknown_mutator or budget_exceeded, or the one a
	// JavaScript mutator threw; docs/mutators.md lists them.
	Code string `json:"code,omitempty"`
	// Reason, Message and ExpectedID say why a mutation was rejected.
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	ExpectedID uint64 `json:"expectedId,omitempty"`
}
