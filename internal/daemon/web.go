package daemon

import (
	"context"

	"github.com/ratelimitd/ratelimitd/web"
)

// startWeb starts the browser console when [web] listen is set.
func (d *Daemon) startWeb() error {
	c := d.cfg.Web
	if c.Listen == "" {
		return nil
	}
	s, err := web.New(web.Options{Listen: c.Listen, TLSCert: c.TLSCert, TLSKey: c.TLSKey, UsersFile: c.UsersFile, TrustedProxies: c.Proxies(),
		Services: d.services()})
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

// WebAddr is the console's listening address ("" when it is off).
func (d *Daemon) WebAddr() string {
	if d.web == nil {
		return ""
	}
	return d.web.Addr().String()
}
