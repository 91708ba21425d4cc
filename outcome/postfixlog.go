package outcome

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
)

// deliveryAgents are the Postfix daemons whose "to=<...>" lines report a
// recipient's delivery (MAILLOG_README).
var deliveryAgents = map[string]bool{"smtp": true, "lmtp": true, "local": true, "virtual": true, "error": true,
	"pipe": true}

// LogFeed follows a Postfix mail log into a Sink: a delivery agent's
// status=bounced (dsn=5.x.x) or status=deferred (4.x.x) line is an outcome
// of its recipient. It joins a message the policy service did not see at
// END-OF-MESSAGE by smtpd's client= and qmgr's from= lines, counts smtpd's
// rejects of unknown recipients (rcptReject), and forgets a message at
// "removed" and at "hold:" (held mail is the postmaster's). Its position
// is kept in the Join. Not safe for concurrent use; Run once.
type LogFeed struct {
	Follower maillog.Follower
	Join     *Join
	Sink     *Sink
	Log      *slog.Logger     // nil: discarded
	now      func() time.Time // nil: time.Now
}

func (f *LogFeed) cursorName() string { return "maillog:" + f.Follower.Path }

// Begin saves the log's current end as the position, unless one is saved,
// so that Run reads every line appended after Begin returns however late
// it starts; it returns why the log could not be looked at.
func (f *LogFeed) Begin() error {
	if f.Join.Cursor(f.cursorName()) != nil {
		return nil
	}
	pos, err := f.Follower.End()
	if err != nil {
		return err
	}
	b, _ := pos.MarshalBinary()
	f.Join.SetCursor(f.cursorName(), b)
	return nil
}

// Run follows the log from its saved position until ctx is done; it
// returns ctx.Err() or why the log could not be read.
func (f *LogFeed) Run(ctx context.Context) error {
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
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
	sl, err := maillog.ParseSyslogLine(line, time.UTC)
	if err != nil {
		return
	}
	if !strings.Contains(sl.Program, "postfix") {
		return
	}
	prog := sl.Program[strings.LastIndexByte(sl.Program, '/')+1:] // the daemon, "smtpd"
	rec, err := maillog.ParsePostfix(sl.Msg)
	if err != nil {
		return
	}
	now := time.Now()
	if f.now != nil {
		now = f.now()
	}
	warn := func(err error) {
		if err != nil {
			f.Log.Warn("outcome feed: not counted: rate store error", "queue_id", rec.QueueID, "client", rec.ClientAddress, "err", err)
		}
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
			warn(f.Sink.recipients(ctx, now, sub, rec.NRcpt))
		}
	case maillog.KindRemoved:
		f.Join.Forget(rec.QueueID)
	case maillog.KindHold:
		f.Join.Exclude(rec.QueueID, now)
	case maillog.KindNoQueue, maillog.KindReject:
		// smtpd's reject of an unknown recipient (NOQUEUE, or under the
		// queue ID after an earlier recipient) names no login: it counts
		// for the login last seen with its client and sender (Session);
		// anyone else's (a forged sender) is no sender's.
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
		warn(err)
	case maillog.KindTo:
		if kind, ok := rec.Outcome(); ok && deliveryAgents[prog] {
			warn(f.Sink.Deliver(ctx, now, Outcome{QueueID: rec.QueueID, Recipient: rec.Recipient, Kind: kind}))
		}
	}
}
