// Package lifecycle is the quarantine's life cycle: it records held
// (Postfix HOLD, milter SMFIR_QUARANTINE) and frozen mail, thaws it
// (postsuper -H and postqueue -i, or SMTP re-injection), deletes it,
// expires it after max_age (RFC 3464 DSN, or kept), and releases it at
// the limit's rate once its key is under the limit ("drip").
//
// Each action is claim, act, record, so a crash repeats only what is
// harmless. Queue IDs are checked (quarantine.ValidQueueID) and confirmed
// in the MTA's queue listing before any command runs with them. The
// Service is safe for concurrent use and reports to an Events.
package lifecycle
