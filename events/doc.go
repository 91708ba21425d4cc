// Package events is the history of decisions that matter (refusals,
// warnings) and of actions (quarantine, rate resets, suspend/resume,
// reloads) in the state file's bucket events/log (codec.go), for
// `ratelimitd events`. Decisions and actions are bounded apart (Options).
// A Log is safe for concurrent use; a nil *Log records nothing.
package events
