// Package mtatest runs a real, private Postfix instance and an in-memory SMTP
// sink inside Go tests, and speaks SMTP (with XCLIENT) to either of them.
//
// Integration tests use it like this:
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
// Everything is torn down at t.Cleanup; on a failed test the tail of the
// Postfix log is written to the test log.
//
// # The Postfix facts this package relies on
//
// Checked with Debian's postfix 3.7 package (Postfix SMTPD_POLICY_README, XCLIENT_README and postsuper(1)):
//
//   - A private instance needs no change to the system configuration in
//     /etc/postfix. Every command takes "-c DIR" (sendmail: "-C DIR"), and
//     when the caller is root Postfix accepts any DIR. Only a non-root caller
//     of the set-gid commands (postqueue, postdrop) would need DIR listed in
//     alternate_config_directories of /etc/postfix/main.cf. MAIL_CONFIG and
//     import_environment are not needed. StartPostfix therefore requires
//     root and fails the test otherwise.
//   - The instance lives in a fresh temporary directory ROOT (mode 0755, with
//     every ancestor searchable by the postfix user) laid out as ROOT/etc
//     (main.cf, master.cf), ROOT/queue (queue_directory), ROOT/data
//     (data_directory, owned by the postfix user, or master cannot take its
//     lock) and ROOT/maillog. The configuration directory must not contain the
//     queue or data directories: "postfix check" walks it and warns about
//     every file not owned by root.
//   - maillog_file must start with one of maillog_file_prefixes (default
//     "/var, /dev/stdout"), so the prefix is set to ROOT. Without
//     maillog_file Postfix logs to a syslog that does not exist here.
//   - master.cf is /etc/postfix/master.cf with the "smtp inet" service renamed
//     to 127.0.0.1:PORT, every other inet service removed (so that concurrent
//     instances cannot collide on a port) and every chroot column set to "n"
//     (a chroot would need copies of /etc files inside the queue directory).
//   - The check_policy_service per-service syntax
//     "check_policy_service { inet:HOST:PORT, timeout=10s, default_action=DUNNO }"
//     (Postfix 3.0 and later) works in both smtpd_recipient_restrictions and
//     smtpd_end_of_data_restrictions. The policy check comes before
//     permit_sasl_authenticated so that authenticated senders are rate
//     limited too. Postfix keeps a policy connection open for several
//     requests (smtpd_policy_service_max_idle) and retries a failed one once
//     after a second before it applies default_action.
//   - XCLIENT is honoured for clients in smtpd_authorized_xclient_hosts
//     (127.0.0.0/8 here) and, with smtpd_sasl_auth_enable = yes,
//     "XCLIENT LOGIN=alice ADDR=192.0.2.7" makes Postfix treat the session
//     as SASL-authenticated user alice from 192.0.2.7; Postfix answers it with
//     a fresh 220 greeting and the client must send EHLO again.
//   - main.cf: mydestination is empty and relayhost = [127.0.0.1]:SINKPORT,
//     so every recipient is relayed to the sink; queue_run_delay = 1s and
//     minimal/maximal_backoff_time = 1s/2s make retries fast;
//     smtpd_error_sleep_time = 0 and high error limits stop smtpd from
//     slowing down or disconnecting a test client that has collected many
//     4xx replies (by default it sleeps a second per reply after 10 errors
//     and hangs up after 20); smtpd_peername_lookup = no and
//     smtp_dns_support_level = disabled keep DNS out of it.
//   - "postqueue -c DIR -j" is the JSON form of "postqueue -p" (where held
//     messages have "!" after the queue ID); Queue and QueueIDs parse it.
//   - "HOLD text" from a policy service at END-OF-MESSAGE puts the message in
//     the hold queue; "postsuper -H ID" moves it to the deferred queue, from
//     which the next queue run (queue_run_delay = 1s here) delivers it.
//   - "postfix start" and "postfix start-fg" both run "postfix check" first,
//     which takes one to several seconds here (dozens of postconf, find
//     and shell runs), and start-fg leaves the master a grandchild (under the
//     postfix-script shell). This package creates the queue directories
//     itself, with the owners, groups and modes that /etc/postfix/postfix-files
//     lists (falling back to "postfix -c DIR check" if it cannot), and runs
//     "master -c DIR -s" as its own child, so that the master dies with the
//     test binary (Pdeathsig) and an instance is up in about half a second. The
//     self-test runs "postfix -c DIR check" on a live instance and asserts it
//     logs no warning. Stopping sends SIGTERM to the master, exactly what
//     "postfix stop" does (without its one-second polling); "postfix -c DIR
//     stop" from a test works too. A master that cannot bind a port exits
//     silently (stderr is /dev/null, postlogd is not up yet), so a start
//     whose freshly picked port was taken meanwhile is retried.
//   - Postfix refuses to read a main.cf modified in the last second or so
//     (it may be half-written) and polls every 300 ms until it is older, so
//     every command run against a freshly written configuration directory
//     stalls for about two seconds. The harness backdates main.cf and
//     master.cf by a minute.
//   - The master makes itself a session and process group leader and, on
//     SIGTERM, signals its process group and exits without waiting, so its
//     children outlive it, reparented to PID 1 (which in this container
//     reaps them only lazily). The package makes the test binary a child
//     subreaper (Linux) and waits for and reaps exactly the master's process
//     group, killing it if any member is still alive after a few seconds,
//     and then checks "master -c DIR -t".
//   - Concurrent instances only need distinct directories and ports: the
//     master lock, the pid file, the public and private sockets and the log
//     are all below ROOT.
//
// The Sink is an emersion/go-smtp server; the client side uses the
// emersion/go-smtp client after a raw EHLO/XCLIENT exchange (the go-smtp
// client has no XCLIENT support).
package mtatest
