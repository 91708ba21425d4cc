package daemon

import (
	"fmt"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

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

// admin is a client of the daemon's admin socket, as the CLI uses it.
func (td *testDaemon) admin() *admin.Client {
	return admin.NewClient(td.Config().Server.AdminSocket)
}

// listed lists the quarantine over the admin socket (key "": all).
func (td *testDaemon) listed(key string) []quarantine.Entry {
	td.t.Helper()
	es, err := td.admin().List(td.t.Context(), admin.ListQuery{Key: key})
	if err != nil {
		td.t.Fatalf("quarantine list: %v", err)
	}
	return es
}

// entriesText is es one per line, for failure messages.
func entriesText(es []quarantine.Entry) (s string) {
	for _, e := range es {
		s += fmt.Sprintf("%+v\n", e)
	}
	return s
}
