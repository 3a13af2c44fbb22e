package wire

import (
	"encoding/json"

	"github.com/canon-sync/canon/schemas"
)

// Protocol is the version of the websocket protocol, sent in the hello
// message. A client that does not know it should close the socket rather
// than guess. docs/websocket.md describes every message.
const Protocol = 1

// Message types, the "type" member of every websocket message.
const (
	// Server to client.
	TypeHello    = "hello"
	TypeVersion  = "version"
	TypeReset    = "reset"
	TypeRejected = "rejected"
	TypePushed   = "pushed"
	TypeError    = "error"
	TypePong     = "pong"
	// Client to server.
	TypePush = "push"
	TypePing = "ping"
)

// Close codes. 1000–1015 are the RFC 6455 ones; 4000–4999 are Canon's.
const (
	// CloseGoingAway (1001): the server is shutting down; reconnect and
	// resume.
	CloseGoingAway = 1001
	// CloseTooBig (1009): a client message was over the size limit.
	CloseTooBig = 1009
	// CloseServerError (1011): the server could not go on (a store error,
	// or the store lagging the changelog for too long); reconnect and
	// resume.
	CloseServerError = 1011
	// CloseBadRequest (4000): the subscription is invalid (org, project,
	// branch or from); do not retry unchanged.
	CloseBadRequest = 4000
	// CloseUnauthenticated (4001): no token, or an invalid or expired one
	// (also sent when the token expires on an open socket); get a new
	// token.
	CloseUnauthenticated = 4001
	// CloseForbidden (4003): the token does not reach the org, project or
	// read scope.
	CloseForbidden = 4003
	// CloseNotServed (4004): this server does not follow the project's
	// partition; connect to one that does.
	CloseNotServed = 4004
	// CloseSlow (4008): the client did not read fast enough and its queue
	// overflowed; reconnect with from= the last version received.
	CloseSlow = 4008
)

// Reset reasons.
const (
	ReasonFutureVersion = "future_version"
	ReasonUnknownBranch = "unknown_branch"
)

// HelloMessage is the first message of every subscription.
type HelloMessage struct {
	Type     string `json:"type"`
	Protocol int    `json:"protocol"`
	Org      string `json:"org"`
	Project  string `json:"project"`
	Branch   string `json:"branch"`
	// From is the version asked for, absent when the client asked for
	// live versions only.
	From *uint64 `json:"from,omitempty"`
	// Head is the branch's latest version in the store when the
	// subscription started (0: no version yet).
	Head uint64 `json:"head"`
	// MaxMessageBytes bounds a client message; PingSeconds is how often
	// the server pings.
	MaxMessageBytes int64 `json:"maxMessageBytes"`
	PingSeconds     int   `json:"pingSeconds"`
	// Push tells whether the socket takes push messages.
	Push bool `json:"push"`
}

// VersionMessage is one version of the subscribed branch. Its bytes are
// the same whether it comes from the store (catch-up) or live; it is
// written by AppendVersion.
type VersionMessage struct {
	Type      string             `json:"type"`
	Org       string             `json:"org"`
	Project   string             `json:"project"`
	Branch    string             `json:"branch"`
	Version   uint64             `json:"version"`
	Parent    uint64             `json:"parent"`
	Base      *schemas.BranchRef `json:"base,omitempty"`
	TS        int64              `json:"ts"`
	StateHash string             `json:"stateHash"`
	// Bundle is the hash of the mutator bundle that decided the version
	// (absent for the built-in and Go mutators): a client that runs the
	// bundle optimistically learns when the server's logic changed.
	Bundle    string                     `json:"bundle,omitempty"`
	Scalars   map[string]json.RawMessage `json:"scalars"`
	Items     []ItemMessage              `json:"items"`
	Mutations []MutationMessage          `json:"mutations"`
	LastIDs   map[string]uint64          `json:"lastIds"`
}

// ItemMessage is an item a version changed; the body is fetched by hash
// from the read API.
type ItemMessage struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Op         string          `json:"op"`
	Meta       json.RawMessage `json:"meta,omitempty"`
	Hash       string          `json:"hash,omitempty"`
	Size       int64           `json:"size,omitempty"`
}

// MutationMessage is the outcome of one mutation of a version.
type MutationMessage struct {
	ClientGroup string `json:"clientGroup"`
	Client      string `json:"client"`
	ID          uint64 `json:"id"`
	Name        string `json:"name"`
	Status      string `json:"status"`
	Error       string `json:"error,omitempty"`
	// Code is the stable code of Error (status error); see Outcome.Code.
	Code string `json:"code,omitempty"`
}

// ResetMessage says the subscription could not resume from From; the
// versions that follow it start after Head.
type ResetMessage struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Branch string `json:"branch"`
	From   uint64 `json:"from"`
	Head   uint64 `json:"head"`
}

// RejectedMessage is a mutation of the project that the sequencer
// rejected (a gap, an unauthorized client group, an invalid record).
type RejectedMessage struct {
	Type        string `json:"type"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
	Branch      string `json:"branch"`
	ClientGroup string `json:"clientGroup"`
	Client      string `json:"client"`
	ID          uint64 `json:"id"`
	Name        string `json:"name"`
	ExpectedID  uint64 `json:"expectedId,omitempty"`
	At          int64  `json:"at"`
}

// EncodeRejected is the rejected message of a rejected record.
func EncodeRejected(r *schemas.Rejected) ([]byte, error) {
	m := RejectedMessage{Type: TypeRejected, Reason: r.Reason, Message: r.Message, ExpectedID: r.ExpectedID, At: r.At}
	if mu := r.Mutation; mu != nil {
		m.Branch, m.ClientGroup, m.Client, m.ID, m.Name = mu.Branch, mu.ClientGroup, mu.Client, mu.ID, mu.Name
	}
	return json.Marshal(m)
}

// PushMessage is a client's push on the socket: the body of the HTTP push
// plus a request id echoed in the answer.
type PushMessage struct {
	Type        string         `json:"type"`
	RequestID   string         `json:"requestId"`
	Branch      string         `json:"branch,omitempty"`
	ClientGroup string         `json:"clientGroup"`
	Mutations   []PushMutation `json:"mutations"`
}

// PushedMessage answers a push once Kafka acknowledged its mutations.
type PushedMessage struct {
	Type      string    `json:"type"`
	RequestID string    `json:"requestId"`
	Mutations []Written `json:"mutations"`
}

// ErrorMessage reports an error; RequestID names the push it answers.
type ErrorMessage struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId,omitempty"`
	Error     *Error `json:"error"`
}

// PingMessage is a client's ping, answered by a PongMessage; every client
// message has its type and request id.
type PingMessage struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId,omitempty"`
}

// PongMessage answers a client's ping message.
type PongMessage struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId,omitempty"`
}
