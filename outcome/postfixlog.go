package outcome

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
)

// deliveryAgents are the Postfix daemons whose "to=<...>" lines report a
// recipient's delivery (MAILLOG_README; error(8) bounces what a
// transport map or a dead host makes undeliverable).
var deliveryAgents = map[string]bool{"smtp": true, "lmtp": true, "local": true, "virtual": true, "error": true,
	"pipe": true}

// LogFeed follows a Postfix mail log (maillog_file, or syslog's
// /var/log/mail.log) into a Sink: a delivery agent's line with
// status=bounced (dsn=5.x.x) or status=deferred (4.x.x) is an outcome of
// its recipient. It also joins a message the policy service was not asked
// about at END-OF-MESSAGE by smtpd's "client=..., sasl_username=..." and
// qmgr's "from=<...>" lines, counts smtpd's NOQUEUE rejects of unknown
// recipients for the SASL login last seen with their client and sender
// (noQueue), and forgets a message at its "removed"
// (delivered, returned, or deleted by postsuper -d: no failure) and at a
// "hold:" (held mail's fate is the postmaster's, not the sender's). Its position is
// kept in the Join. Not safe for concurrent use; Run once.
type LogFeed struct {
	Follower maillog.Follower
	Join     *Join
	Sink     *Sink
	Log      *slog.Logger // nil: discarded
	// Lines counts the lines read; Unparsable those that are not syslog
	// lines.
	Lines, Unparsable atomic.Int64
	// now reads the clock; nil: time.Now.
	now func() time.Time
}

// cursorName is the key of the feed's position in the Join.
func (f *LogFeed) cursorName() string { return "maillog:" + f.Follower.Path }

// Run follows the log from its saved position until ctx is done; it
// returns ctx.Err() or why the log could not be read.
func (f *LogFeed) Run(ctx context.Context) error {
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	if f.now == nil {
		f.now = time.Now
	}
	var pos maillog.Position
	if b := f.Join.Cursor(f.cursorName()); b != nil {
		if err := pos.UnmarshalBinary(b); err != nil {
			f.Log.Warn("outcome feed: saved log position unreadable, starting at the log's end", "log", f.Follower.Path, "err", err)
			pos = maillog.Position{}
		}
	}
	f.Log.Info("outcome feed: following the mail log", "log", f.Follower.Path, "offset", pos.Offset)
	return f.Follower.Follow(ctx, pos, func(line []byte, p maillog.Position) {
		f.Line(ctx, string(line))
		b, _ := p.MarshalBinary()
		f.Join.SetCursor(f.cursorName(), b)
	})
}

// Line takes one log line.
func (f *LogFeed) Line(ctx context.Context, line string) {
	f.Lines.Add(1)
	sl, err := maillog.ParseSyslogLine(line, time.UTC)
	if err != nil {
		f.Unparsable.Add(1)
		return
	}
	prog := sl.Program
	if !strings.Contains(prog, "postfix") {
		return
	}
	if i := strings.LastIndexByte(prog, '/'); i >= 0 {
		prog = prog[i+1:]
	}
	rec, err := maillog.ParsePostfix(sl.Msg)
	if err != nil {
		return
	}
	now := time.Now()
	if f.now != nil {
		now = f.now()
	}
	switch rec.Kind {
	case maillog.KindClient:
		if _, ok := f.Join.Lookup(rec.QueueID); !ok && prog == "smtpd" {
			f.Join.Record(rec.QueueID, Submission{Time: now, SASLUsername: rec.SASLUsername, ClientAddress: rec.ClientAddress,
				ClientName: rec.ClientName})
		}
	case maillog.KindFrom:
		// A message the log joined: its recipients count here.
		if sub, ok := f.Join.SetSender(rec.QueueID, rec.Sender); ok {
			if err := f.Sink.recipients(ctx, now, sub, rec.NRcpt); err != nil {
				f.Log.Warn("outcome feed: recipients not counted: rate store error", "queue_id", rec.QueueID, "err", err)
			}
		}
	case maillog.KindRemoved:
		f.Join.Forget(rec.QueueID)
	case maillog.KindHold:
		f.Join.Exclude(rec.QueueID, now)
	case maillog.KindNoQueue, maillog.KindReject:
		f.rcptReject(ctx, now, prog, &rec)
	case maillog.KindTo:
		kind, ok := rec.Outcome()
		if !ok || !deliveryAgents[prog] {
			return
		}
		if err := f.Sink.Deliver(ctx, now, Outcome{QueueID: rec.QueueID, Recipient: rec.Recipient, Kind: kind}); err != nil {
			f.Log.Warn("outcome feed: outcome not counted: rate store error", "queue_id", rec.QueueID, "err", err)
		}
	}
}

// rcptReject counts smtpd's reject of an unknown recipient at RCPT
// ("NOQUEUE: reject: RCPT from NAME[ADDR]: 550 5.1.1 <r>: ...;
// from=<s> to=<r> ...", or "QUEUEID: reject: ..." once an earlier
// recipient was accepted) for the request of its client address and
// sender the daemon last saw with a SASL login within the hour
// (Join.Session): the line names no login, the message is not joined
// before END-OF-MESSAGE, and a reject of anyone else (an unauthenticated
// client, a forged sender) is no sender's.
func (f *LogFeed) rcptReject(ctx context.Context, now time.Time, prog string, rec *maillog.Record) {
	if _, ok := rec.Outcome(); !ok || prog != "smtpd" {
		return
	}
	sub, ok := f.Join.Session(rec.ClientAddress, rec.Sender, now)
	if !ok {
		f.Sink.Unjoined.Add(policy.OutcomeUnknownRcpt)
		return
	}
	err := f.Sink.recipients(ctx, now, sub, 1)
	if err == nil {
		err = f.Sink.count(ctx, now, sub, rec.Recipient, policy.OutcomeUnknownRcpt)
	}
	if err != nil {
		f.Log.Warn("outcome feed: outcome not counted: rate store error", "client", rec.ClientAddress, "err", err)
	}
}
