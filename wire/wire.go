// Package wire is the public wire contract of Canon's HTTP and websocket
// APIs, shared by the server (producer, readapi, projector/live), the Go
// client and the coming TypeScript client: the push request and its
// answer, the outcomes of waited-for mutations, the error answer with
// every error code of every API, and the websocket's messages, close
// codes and protocol number. Each message has one codec here, used by
// both sides (yorkie's api/types is the model).
//
// docs/openapi.yaml describes the same types; a test of this package
// fails when the two disagree. The package imports only the standard
// library and schemas, so that clients link neither Kafka nor Pebble.
package wire
