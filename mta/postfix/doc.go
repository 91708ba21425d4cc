// Package postfix implements the Postfix SMTP access policy delegation
// protocol (SMTPD_POLICY_README, section "Protocol description"): a codec
// that reads a request into a policy.Request and writes a policy.Decision
// back as an access(5) action, and a Server in the shape of net/http that
// answers requests on persistent unix or TCP connections.
//
// # Protocol
//
// A request is a sequence of name=value lines terminated by an empty line; the
// reply is one "action=..." line, also terminated by an empty line. Postfix
// reuses a connection for many requests (up to smtpd_policy_service_max_idle,
// 300 s idle, and smtpd_policy_service_max_ttl, 1000 s), so the server keeps
// connections open. "In case of trouble the policy server must not send a
// reply. Instead the server must log a warning and disconnect"
// (SMTPD_POLICY_README): the Server closes a connection that sends bad input
// without answering, which makes Postfix retry the request.
//
// Exim's ${readsocket{inet:host:port}{request}{timeout}{eol}{fail}} speaks the
// same protocol: it writes one request, shuts down its write side, and reads
// the reply until end of file. The Decoder accepts end of file after at least
// one complete attribute line as the end of such a request, and the Server
// answers it and closes the connection. Every attribute line, the last one
// included, must end in "\n" ("\r\n" is accepted too): input that ends
// inside a line is treated as truncated and not answered. The ACL then
// matches the "action=..." text itself; Exim does not interpret it.
//
// # Reply mapping
//
// WriteReply translates a policy.Decision into the access(5) action that
// Postfix executes at the request's protocol_state:
//
//	Pass    DUNNO
//	Defer   450 4.7.1 text   (Decision.Code and Enhanced when valid 4xx)
//	Reject  550 5.7.1 text   (Decision.Code and Enhanced when valid 5xx)
//	Hold    HOLD text
//	Freeze  HOLD text        (the policy protocol cannot freeze a message;
//	                          the milter front end in mta/milter can)
//	Warn    PREPEND header   (Decision.Header set, state MAIL, RCPT or DATA)
//	Warn    WARN text        (otherwise)
//
// Defer uses an explicit "450 4.7.1" rather than DEFER_IF_PERMIT. Postfix
// acts on a numeric reply at once, where check_policy_service runs, with our
// enhanced status code; DEFER_IF_PERMIT is only remembered and takes effect
// if the rest of the restriction lists ends in a permit, so its outcome
// depends on what follows check_policy_service in main.cf (a later reject
// turns it into a 5xx). A rate limit is a verdict of its own; where
// check_policy_service sits in the restriction list decides which checks
// run before it.
//
// Defer and Reject always carry text (DefaultDeferText, DefaultRejectText
// when the Decision has none): Postfix reads an all-numeric action as OK.
// HOLD and WARN text is only logged by Postfix, never shown to the client;
// it is Decision.Text, else Decision.Reason.
//
// HOLD is delegated by Postfix to the cleanup server and is ignored (with a
// warning in the Postfix log) before MAIL FROM and in VRFY or ETRN; PREPEND is
// additionally ignored at END-OF-MESSAGE (smtpd_end_of_data_restrictions). At
// those protocol states WriteReply sends "WARN text" instead, so the event is
// still logged by Postfix. An unknown or empty protocol_state (a non-Postfix
// client) gets the action unchanged.
//
// Every reply is a single line of valid UTF-8 without control characters,
// at most MaxReplyLen bytes long, whatever the Decision contains.
//
// # Front-end contract
//
// The Server asks an mta.Decider for every verdict, reports to a Metrics
// that extends mta.Metrics, and logs decisions with mta.LogDecision, like
// the milter front end.
//
// # Queue commands
//
// Queue runs Postfix's queue commands on mail the quarantine holds
// (postsuper -H, -f and -d, postqueue -i and -j, postcat -q); it
// implements quarantine/lifecycle's Queue, and runs Exim's commands when
// configured with them.
package postfix
