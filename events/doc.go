// Package events is the history of decisions that matter (refusals,
// warnings) and of actions (quarantine, rate resets, suspend/resume,
// reloads), one checksummed record per Event in the state file's bucket
// events/log (layout in codec.go), queried by `ratelimitd events`.
// Decisions and actions are bounded apart (Options), so a flood of
// refusals prunes no operator's action. A Log is safe for concurrent use;
// a nil *Log records nothing.
package events
