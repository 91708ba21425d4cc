package daemon

// forgedEndOfMessage sends one END-OF-MESSAGE policy request with the given
// queue_id, as any local user who can reach the policy port can, and
// returns the action line.
func (td *testDaemon) forgedEndOfMessage(user, queueID string) string {
	td.t.Helper()
	return td.forgedEndOfMessageAs(user, queueID, "forged."+queueID)
}

// forgedEndOfMessageAs is forgedEndOfMessage with the policy instance
// given (one per forging daemon instance or message).
func (td *testDaemon) forgedEndOfMessageAs(user, queueID, instance string) string {
	td.t.Helper()
	return td.ask("protocol_state=END-OF-MESSAGE", "sasl_username="+user, "sender="+user+"@example.org",
		"recipient=victim@example.net", "recipient_count=1", "client_address=192.0.2.66",
		"queue_id="+queueID, "instance="+instance, "size=100")
}
