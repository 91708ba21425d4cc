package daemon

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/outcome"
	"github.com/ratelimitd/ratelimitd/policy"
)

// openOutcome opens the outcome join and its listeners when [outcome] has
// a feed.
func (d *Daemon) openOutcome() error {
	o := d.cfg.Outcome
	if !o.Feeds() {
		return nil
	}
	j, err := outcome.Open(d.db, time.Now(), outcome.Options{Lifetime: time.Duration(o.Lifetime), MaxMessages: o.MaxMessages})
	if err != nil {
		return fmt.Errorf("%s: %w", d.cfg.Server.DBPath(), err)
	}
	d.join = j
	d.cleanup = append(d.cleanup, func() { j.Close() })
	d.flusher.Add("outcome join", j.Tick)
	if o.NoticesListen != "" {
		if d.noticesL, err = net.Listen("tcp", o.NoticesListen); err != nil {
			return fmt.Errorf("outcome.notices_listen: %w", err)
		}
		d.cleanup = append(d.cleanup, func() { d.noticesL.Close() })
	}
	if o.EximListen != "" {
		if d.eximL, err = net.Listen("tcp", o.EximListen); err != nil {
			return fmt.Errorf("outcome.exim_listen: %w", err)
		}
		d.cleanup = append(d.cleanup, func() { d.eximL.Close() })
	}
	return nil
}

// startOutcomeFeed serves the outcome feeds until Shutdown.
func (d *Daemon) startOutcomeFeed() {
	if d.join == nil {
		return
	}
	sink := outcome.NewSink(d.join, d.engine)
	d.metrics.Registry().MustRegister(metrics.OutcomeCollectors(sink, d.join)...)
	if d.noticesL != nil {
		d.notices = outcome.NewNoticeServer(sink, d.log)
		d.goServe("outcome notices", func() error { return d.notices.Serve(d.noticesL) }, outcome.ErrServerClosed)
		d.log.Info("outcome feed: receiving notices over LMTP", "listen", d.noticesL.Addr().String())
	}
	if d.eximL != nil {
		d.exim = outcome.NewEximServer(sink, d.log)
		d.goServe("outcome exim", func() error { return d.exim.Serve(d.eximL) }, outcome.ErrServerClosed)
		d.log.Info("outcome feed: receiving Exim delivery events", "listen", d.eximL.Addr().String())
	}
	if d.cfg.Outcome.Maillog == "" {
		return
	}
	feed := &outcome.LogFeed{Join: d.join, Sink: sink, Log: d.log,
		Follower: maillog.Follower{Path: d.cfg.Outcome.Maillog, Poll: time.Duration(d.cfg.Outcome.Poll)}}
	if err := feed.Begin(); err != nil {
		d.log.Warn("outcome feed: cannot look at the mail log, reading it from its end once it can be", "log", feed.Follower.Path, "err", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	d.stopFeed = stop
	d.wg.Go(func() {
		for {
			err := feed.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			d.metrics.Fault("outcome feed")
			d.log.Error("outcome feed: cannot read the mail log, retrying in 10s", "log", feed.Follower.Path, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	})
}

// joinSubmission notes a request for smtpd's NOQUEUE rejects
// (outcome.Join.Saw) and joins an END-OF-MESSAGE request's queue ID to it
// when the message goes on to delivery, counting its recipients in the
// ratio limits; one held, frozen or refused (by either front end) is
// excluded.
func (d *Daemon) joinSubmission(ctx context.Context, now time.Time, req *policy.Request, dec *policy.Decision) {
	if d.join == nil {
		return
	}
	d.join.Saw(now, req)
	if req.ProtocolState != policy.StateEndOfMessage || req.QueueID == "" {
		return
	}
	if !dec.Action.Admits() {
		d.join.Exclude(req.QueueID, now)
		return
	}
	_, before := d.join.Lookup(req.QueueID) // by the other front end, its recipients counted
	if !d.join.Record(req.QueueID, outcome.SubmissionOf(now, req)) {
		if maillog.ValidQueueID(req.QueueID) {
			d.metrics.Fault("outcome join full")
		}
		return
	}
	if _, joined := d.join.Lookup(req.QueueID); !joined || before {
		return // excluded by the other front end, or counted
	}
	if _, err := d.engine.RecordRecipients(ctx, now, req, req.RecipientCount); err != nil {
		d.metrics.Fault("outcome recipients")
		d.log.Warn("outcome: recipients not counted in the ratio limits: rate store error", "queue_id", req.QueueID, "err", err)
	}
}

// stopOutcomeFeeds stops the feeds, before the stores' last flush.
func (d *Daemon) stopOutcomeFeeds() {
	if d.stopFeed != nil {
		d.stopFeed()
	}
	if d.exim != nil {
		d.exim.Close()
	}
	if d.notices != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if d.notices.Shutdown(ctx) != nil {
			d.notices.Close()
		}
	}
}
