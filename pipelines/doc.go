// Package pipelines holds the data teams' jobs over Canon's topics: replay
// (re-run a branch's canonical mutations onto a new branch and check that
// every state hash is the original's), rebase (send a branch's mutations
// to a new branch made from another base and summarize what changed),
// export (a project's history and a snapshot as NDJSON) and import (a
// snapshot as a new project or branch).
//
// The jobs are trusted tools that talk to Kafka directly. A job reads the
// project's partition of canon.versions read_committed from its start
// into an in-memory Pebble store (the store the sequencer decides
// against), plans the mutations it will send to its target, and either
// decides them in memory with a model.Decider (dry runs) or produces them
// to canon.mutations, without a principal, to the partition
// schemas.Partition picks, and follows canon.versions and canon.rejected
// until every one is decided.
//
// Every job can be run again after an interruption: its mutations have
// fixed clients and ids (the job's own client for what it makes itself,
// the source's clients with renumbered ids for what it re-sends), so the
// sequencer drops the copies of a rerun as duplicates, and a rerun checks
// that an existing target was made by the same job before it goes on.
// docs/pipelines.md has the details.
package pipelines
