// Package mtatest runs a private Postfix instance and an in-memory SMTP
// sink inside Go tests, and speaks SMTP (with XCLIENT) to either of them:
//
//	sink := mtatest.StartSink(t)
//	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{
//		SinkAddr:      sink.Addr(),
//		PolicyService: "inet:" + policyListener.Addr().String(),
//	})
//	err := mtatest.Send(t, pf.Addr(), mtatest.Mail{
//		Login: "alice", ClientAddr: "192.0.2.7",
//		From: "alice@example.org", To: []string{"bob@example.net"},
//		Data: mtatest.BuildMessage("alice@example.org", "bob@example.net", "hi", "hello\n"),
//	})
//	msgs := sink.WaitCount(t, 1, 10*time.Second)
//
// Everything is torn down at t.Cleanup; a failed test logs the tail of the
// Postfix log. A missing Postfix or a caller that is not root fails the
// test, it never skips it.
//
// The Postfix instance (Debian's postfix 3.7; SMTPD_POLICY_README,
// XCLIENT_README, postsuper(1)):
//   - lives in a temporary directory ROOT: ROOT/etc (main.cf, master.cf),
//     ROOT/queue, ROOT/data (owned by postfix) and ROOT/maillog; every
//     command takes "-c ROOT/etc", which Postfix accepts from root only;
//   - master.cf is the system's with "smtp inet" on 127.0.0.1:PORT, no other
//     inet service and no chroot; main.cf relays everything to the sink,
//     retries within seconds, never sleeps on client errors and uses no DNS;
//   - the policy check is "check_policy_service { inet:HOST:PORT, ... }"
//     before permit_sasl_authenticated in the recipient and end-of-data
//     restrictions, and "XCLIENT LOGIN= ADDR=" from 127.0.0.0/8 makes a
//     session SASL-authenticated (Postfix greets again; the client sends
//     EHLO again);
//   - the harness creates the queue directories itself (postfix-files),
//     backdates main.cf (Postfix stalls on a configuration younger than a
//     second) and runs "master -c DIR -s" as its child with Pdeathsig;
//     stopping sends SIGTERM and reaps the master's process group (the
//     test binary is a child subreaper on Linux);
//   - concurrent instances need only distinct directories and ports.
//
// The Sink is an emersion/go-smtp server; the client sends EHLO and
// XCLIENT itself, then uses the emersion/go-smtp client.
package mtatest
