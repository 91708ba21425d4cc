package admin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// ListQuery is the filter of GET /v1/quarantine: exact sender, key and
// limit, states ("" or "pending": held and frozen) and age (0: any).
type ListQuery struct {
	Sender string
	Key    string
	Limit  string
	State  string
	Since  time.Duration
}

func (lq ListQuery) values() url.Values {
	form := map[string]string{"sender": lq.Sender, "key": lq.Key, "limit": lq.Limit, "state": lq.State}
	if lq.Since > 0 {
		form["since"] = lq.Since.String()
	}
	return FormQuery(form)
}

// ParseListQuery reads sender, key, limit, state and since (a period).
func ParseListQuery(v url.Values) (ListQuery, error) {
	lq := ListQuery{Sender: v.Get("sender"), Key: v.Get("key"), Limit: v.Get("limit"), State: v.Get("state")}
	if s := v.Get("since"); s != "" {
		d, err := human.ParseDuration(s)
		if err != nil {
			return lq, fmt.Errorf("since: %w", err)
		}
		lq.Since = d
	}
	return lq, nil
}

// Filter is lq as of now. Errors: an unknown state.
func (lq ListQuery) Filter(now time.Time) (quarantine.Filter, error) {
	f := quarantine.Filter{Sender: lq.Sender, Key: lq.Key, Limit: lq.Limit}
	if lq.State != "" && lq.State != "pending" {
		for _, name := range strings.Split(lq.State, ",") {
			st, err := quarantine.ParseState(strings.TrimSpace(name))
			if err != nil {
				return f, err
			}
			f.States = append(f.States, st)
		}
	}
	if lq.Since > 0 {
		f.Since = now.Add(-lq.Since)
	}
	return f, nil
}

// errNoQuarantine is returned by a Local backend without a quarantine.
var errNoQuarantine = errors.New("quarantine not opened")

func (l *Local) by(offline string) string {
	if l.By != "" {
		return l.By
	}
	return offline
}

// Show implements Backend; unavailable content is res.Error.
func (l *Local) Show(ctx context.Context, id string, raw bool) (ShowResult, error) {
	if l.Quarantine == nil {
		return ShowResult{}, errNoQuarantine
	}
	e, body, err := l.Quarantine.Show(ctx, id, raw)
	if errors.Is(err, quarantine.ErrNotFound) {
		return ShowResult{}, err
	}
	res := ShowResult{Entry: e, Body: string(body)}
	if err != nil {
		res.Error = err.Error()
	}
	return res, nil
}

// Act implements Backend.
func (l *Local) Act(ctx context.Context, thaw bool, sel lifecycle.Selection) ([]lifecycle.Outcome, error) {
	if l.Quarantine == nil {
		return nil, errNoQuarantine
	}
	sel.By = l.by(LocalUser() + ", offline CLI")
	if thaw {
		return l.Quarantine.Thaw(ctx, sel)
	}
	return l.Quarantine.Delete(ctx, sel)
}

// Suspend implements Backend.
func (l *Local) Suspend(_ context.Context, key string, resume bool) (SuspendResult, error) {
	if l.Quarantine == nil {
		return SuspendResult{}, errNoQuarantine
	}
	by := l.by("offline CLI")
	res := SuspendResult{Key: key, Suspended: !resume}
	e := events.Event{Key: key, Action: events.Suspend, By: by, Detail: "automatic release suspended"}
	was, err := l.Quarantine.Suspend(key, by, resume)
	if resume {
		res.Was = was
		e.Action, e.Detail = events.Resume, "automatic release resumed"
		if !res.Was {
			e.Detail = "automatic release was not suspended"
		}
	}
	if err == nil {
		l.record(e)
	}
	return res, err
}

// List implements Backend.
func (l *Local) List(_ context.Context, lq ListQuery) ([]quarantine.Entry, error) {
	if l.Quarantine == nil {
		return nil, errNoQuarantine
	}
	f, err := lq.Filter(time.Now())
	if err != nil {
		return nil, badRequest{err}
	}
	return l.Quarantine.List(f)
}

// List implements Backend.
func (c *Client) List(ctx context.Context, lq ListQuery) ([]quarantine.Entry, error) {
	return call[[]quarantine.Entry](ctx, c, "GET", "/v1/quarantine?"+lq.values().Encode(), nil)
}

// Show implements Backend.
func (c *Client) Show(ctx context.Context, id string, raw bool) (ShowResult, error) {
	q := ""
	if raw {
		q = "?raw=1"
	}
	return call[ShowResult](ctx, c, "GET", "/v1/quarantine/"+url.PathEscape(id)+q, nil)
}

// Act implements Backend.
func (c *Client) Act(ctx context.Context, thaw bool, sel lifecycle.Selection) ([]lifecycle.Outcome, error) {
	return call[[]lifecycle.Outcome](ctx, c, "POST", "/v1/quarantine/"+map[bool]string{true: "thaw", false: "delete"}[thaw], sel)
}

// Suspend implements Backend.
func (c *Client) Suspend(ctx context.Context, key string, resume bool) (SuspendResult, error) {
	return call[SuspendResult](ctx, c, "POST", "/v1/quarantine/suspend", SuspendRequest{Key: key, Resume: resume})
}
