// Package events is the history of the decisions that matter (refusals,
// warnings) and of actions (quarantine, rate resets, suspend/resume,
// reloads), each an Event, queried by `ratelimitd events`.
//
// A Log keeps one checksummed statedb record per event in the state file,
// bucket events/log (layout in codec.go). Decisions and other actions are
// bounded apart (Options), so no flood of refusals prunes an operator's
// action; the decisions of one key, limit and action within one
// Options.Coalesce interval are one record with a count.
//
// Record queues without waiting for the disk; Tick (statedb.Flusher)
// writes. A Log is safe for concurrent use; a nil *Log records nothing.
package events
