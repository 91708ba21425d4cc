// Package lifecycle is the quarantine's life cycle: it records the
// messages ratelimitd holds (Postfix HOLD through policy delegation or the
// milter's SMFIR_QUARANTINE) and freezes (the milter), releases them
// ("thaw": postsuper -H then postqueue -i for held mail, SMTP re-injection
// for frozen mail), deletes them, expires them after max_age (a RFC 3464
// delivery status notification to the envelope sender, or keeping them),
// and releases them automatically, oldest first at the limit's own rate,
// once their key is back under its limit ("drip").
//
// Every action on an entry is exactly-once: the entry is claimed
// (quarantine.Store.Claim, committed before anything else happens), the
// action run, and the outcome recorded, so two concurrent thaws of one
// message re-inject it once, and a crash in between repeats an action only
// where repeating is harmless (postsuper -H of a released message).
//
// Held mail lives in the MTA's own queue, which the Service reaches
// through the Queue interface declared here: release, return to the
// sender, delete, show and list. The Postfix implementation (postsuper,
// postqueue, postcat; Exim's commands when configured with them) is
// postfix.Queue in mta/postfix.
//
// Queue IDs come from the MTA through the policy protocol, where any local
// user who can reach the policy port can write one, so a queue ID is
// checked against the MTAs' syntax (quarantine.ValidQueueID) before it is
// stored or given to the Queue, whose commands take it as one argv element
// and never run through a shell. postsuper, postqueue, postcat and exim
// take the queue ID as an option's argument, where "--" does not apply; a
// valid ID never starts with '-', so it cannot be read as an option.
//
// The Service is safe for concurrent use. It reports what it does to an
// Events implementation (a notification component); the default does
// nothing. The daemon wires a Service to its store, engine, admin API and
// milter.
package lifecycle
