// Package e2e holds end-to-end tests that run several of Canon's
// components together in one process against the real Kafka broker of
// package testenv: the ingest with the sequencer, later the read side and
// the projectors. It has no code of its own.
package e2e
