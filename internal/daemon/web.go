package daemon

import (
	"context"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/web"
)

// startWeb starts the browser console when [web] listen is set.
func (d *Daemon) startWeb() error {
	c := d.cfg.Web
	if c.Listen == "" {
		return nil
	}
	opts := web.Options{Listen: c.Listen, TLSCert: c.TLSCert, TLSKey: c.TLSKey, UsersFile: c.UsersFile,
		Rates: d.engine, Quarantine: d.q.svc, Health: d.webHealth, Notify: func(e notify.Event) { d.notifier.Notify(e) }, Logger: d.log}
	if d.events != nil {
		opts.Events = d.events
	}
	s, err := web.New(opts)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	d.web = s
	d.cleanup = append(d.cleanup, func() { s.Shutdown(context.Background()) })
	d.listeners = append(d.listeners, "console "+s.URL())
	return nil
}

// webHealth is the daemon's state on the console's overview.
func (d *Daemon) webHealth() web.Health {
	st := d.Status()
	h := web.Health{Backend: "local", Version: st.Version, Started: st.Started}
	if st.Store != nil {
		h.Backend, h.Degraded, h.DegradedSince, h.StoreError = "redis", st.Store.Degraded, st.Store.Since, st.Store.LastError
	}
	if st.State != nil {
		h.LastFlushError, h.LastFlushErrorAt = st.State.LastError, st.State.LastErrorAt
	}
	if st.Notify != nil {
		h.NotifyFailed, h.NotifyDropped = st.Notify.Failed, st.Notify.Dropped
	}
	return h
}

// WebAddr is the console's listening address ("" when it is off).
func (d *Daemon) WebAddr() string {
	if d.web == nil {
		return ""
	}
	return d.web.Addr().String()
}
