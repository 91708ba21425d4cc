package main

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// startNotify starts the [notify] sender and registers its metrics.
// Changes to [notify] take effect at the next restart, not on SIGHUP.
func (d *daemon) startNotify() error {
	n, err := notify.New(d.cfg.Notify, notify.Options{Logger: d.log})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	d.notifier = n
	d.metrics.reg.MustRegister(n.Collectors()...)
	return nil
}

// notifyRefusal queues the limit_refused event for a decision that
// refused, held or froze (not warn, not a fail-open fault). The notifier
// keeps one event per key, limit and period; Notify never blocks.
func (d *daemon) notifyRefusal(req *policy.Request, dec *policy.Decision) {
	if !d.notifier.Enabled() || dec.Fault != nil || dec.Limit == "" || dec.Action == policy.Pass || dec.Action == policy.Warn {
		return
	}
	e := notify.Event{Kind: notify.LimitRefused, Key: dec.Key, Limit: dec.Limit, Action: dec.Action.String(),
		Rate: dec.Rate, Max: dec.Max, Sender: req.Sender, Client: req.ClientAddress, Detail: dec.Text}
	for _, l := range d.engine.Limits() {
		if l.Name == dec.Limit {
			e.Period = l.Period
		}
	}
	d.notifier.Notify(e)
}

// cliUser names the user running the CLI, for the audit trail of commands
// that act without the daemon: "alice (uid 1000)".
func cliUser() string {
	uid := os.Getuid()
	if u, err := user.LookupId(fmt.Sprint(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// notifyOffline sends one event from the CLI when no daemon runs (the
// daemon sends its own), waiting up to 30 s for delivery. Failures are
// returned for the caller to print as a warning.
func notifyOffline(cfg notify.Config, e notify.Event) error {
	n, err := notify.New(cfg, notify.Options{})
	if err != nil || !n.Enabled() {
		return err
	}
	n.Notify(e)
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		return err
	}
	if st := n.Stats(); st.Failed > 0 {
		return fmt.Errorf("%d notifications failed", st.Failed)
	}
	return nil
}
