// Package lifecycle is the quarantine's life cycle: it records what
// ratelimitd holds (Postfix HOLD through policy delegation or the milter's
// SMFIR_QUARANTINE) and freezes (the milter), releases it ("thaw":
// postsuper -H and postqueue -i for held mail, SMTP re-injection for
// frozen mail), deletes it, expires it after max_age (an RFC 3464 DSN, or
// keeping it), and releases it automatically at the limit's own rate once
// its key is back under the limit ("drip").
//
// Every action is exactly-once: claim (quarantine.Store.Claim), act,
// record the outcome; a crash in between repeats only what is harmless to
// repeat. Held mail is reached through the Queue interface (postfix.Queue
// in mta/postfix runs Postfix's or Exim's commands); a queue ID is checked
// against the MTAs' syntax (quarantine.ValidQueueID) and confirmed in the
// MTA's queue listing before any command runs with it as one argv element.
//
// The Service is safe for concurrent use and reports to an Events.
package lifecycle
