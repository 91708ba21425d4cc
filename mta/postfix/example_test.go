package postfix_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
)

// A request as Postfix sends it at the RCPT stage (shortened), decoded, and
// the reply to a Defer decision.
func Example() {
	in := "request=smtpd_access_policy\n" +
		"protocol_state=RCPT\n" +
		"protocol_name=ESMTP\n" +
		"client_address=192.0.2.17\n" +
		"sasl_username=alice\n" +
		"sender=alice@example.org\n" +
		"recipient=bob@example.net\n" +
		"size=5123\n" +
		"mail_version=3.8.6\n" +
		"\n"
	dec := postfix.NewDecoder(bufio.NewReader(strings.NewReader(in)))
	var req policy.Request
	if err := dec.Decode(&req); err != nil {
		panic(err)
	}
	fmt.Printf("%s %s %s -> %s, %d bytes, via %s\n",
		req.ProtocolState, req.SASLUsername, req.Sender, req.Recipient, req.Size, req.Stage)

	w := bufio.NewWriter(os.Stdout)
	postfix.WriteReply(w, policy.Decision{
		Action: policy.Defer,
		Text:   "Too much mail from alice, try again later",
	}, req.ProtocolState)
	postfix.WriteReply(w, policy.Decision{
		Action: policy.Warn,
		Header: "X-Rate-Limit: user_hourly 210/200",
	}, req.ProtocolState)
	postfix.WriteReply(w, policy.Decision{Action: policy.Freeze, Text: "held for review"}, policy.StateEndOfMessage)
	// Output:
	// RCPT alice alice@example.org -> bob@example.net, 5123 bytes, via policy
	// action=450 4.7.1 Too much mail from alice, try again later
	//
	// action=PREPEND X-Rate-Limit: user_hourly 210/200
	//
	// action=HOLD held for review
}
