package admin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"sort"
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Backend answers the rate and quarantine commands: a Client of the
// running daemon, or a Local backend on the state file when none runs
// (Open picks). Errors are the operation's, with their text fit for the
// operator.
type Backend interface {
	// Rate returns each limit's rate of key.
	Rate(key string) ([]policy.KeyRate, error)
	// Rates returns the rates nearest their limits first, at most top
	// (0: all), only the refused ones when over is set.
	Rates(top int, over bool) ([]policy.KeyRate, error)
	// Reset forgets key's rate under limit, or under every limit when
	// limit is "".
	Reset(key, limit string) (ResetResult, error)
	// List returns the quarantined messages lq selects, newest first.
	List(lq ListQuery) ([]quarantine.Entry, error)
	// Show returns one quarantined message and its content (raw: the
	// stored bytes); quarantine.ErrNotFound's text when there is none.
	Show(id string, raw bool) (ShowResult, error)
	// Thaw and Delete act on the messages sel selects, one outcome each.
	Thaw(sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	Delete(sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	// Suspend suspends the automatic release of key's messages, or
	// resumes it.
	Suspend(key string, resume bool) (SuspendResult, error)
	// EventList returns the events q selects, newest first; EventSummary
	// sums them up per key (package events).
	EventList(q events.Query) ([]events.Event, error)
	EventSummary(q events.Query) ([]events.KeySummary, error)
	// Close releases the backend (a Local one writes any change and
	// closes the file).
	Close() error
}

// Open returns a Client of the daemon at the admin socket when one
// answers there, else offline()'s backend (the state file opened by the
// caller). Errors: those of asking the daemon other than ErrNoDaemon, and
// offline's.
func Open(socket string, offline func() (Backend, error)) (Backend, error) {
	c := NewClient(socket)
	if _, err := c.Status(); err == nil {
		return c, nil
	} else if !errors.Is(err, ErrNoDaemon) {
		return nil, err
	}
	return offline()
}

// With runs fn on the backend Open returns and closes it: it returns fn's
// error, else the error of closing.
func With(socket string, offline func() (Backend, error), fn func(Backend) error) error {
	b, err := Open(socket, offline)
	if err != nil {
		return err
	}
	err = fn(b)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	return err
}

// ResetResult is the answer to POST /v1/rate/reset.
type ResetResult struct {
	Key     string `json:"key"`
	Limit   string `json:"limit,omitempty"`
	Removed int    `json:"removed"`
}

// ShowResult is the answer to GET /v1/quarantine/{id}: the entry, its
// content (a preview, or the raw bytes) and, when the content is
// unavailable (postcat failed, no queue ID), why.
type ShowResult struct {
	Entry quarantine.Entry `json:"entry"`
	Body  string           `json:"body"`
	Error string           `json:"error,omitempty"`
}

// SuspendRequest and SuspendResult are POST /v1/quarantine/suspend: Was
// reports, on a resume, whether the key was suspended.
type SuspendRequest struct {
	Key    string `json:"key"`
	Resume bool   `json:"resume,omitempty"`
}

// SuspendResult: see SuspendRequest.
type SuspendResult struct {
	Key       string `json:"key"`
	Suspended bool   `json:"suspended"`
	Was       bool   `json:"was_suspended,omitempty"`
}

// Rates is the rate state the admin API reads and resets;
// *policy.Engine implements it.
type Rates interface {
	Lookup(ctx context.Context, now time.Time, key string) ([]policy.KeyRate, error)
	All(ctx context.Context, now time.Time) ([]policy.KeyRate, error)
	Reset(ctx context.Context, key, limit string) (int, error)
}

// Local is the Backend on an engine and a quarantine opened in this
// process: the daemon's own (the server answers through it), or the state
// file opened by the CLI when no daemon runs. Quarantine may be nil for
// the rate operations only. By names who acts, for the quarantine's log;
// empty means the user running this process, offline. Safe for concurrent
// use as far as Rates and Quarantine are.
type Local struct {
	Engine     Rates
	Quarantine *lifecycle.Service
	By         string
	// Events is the event log read by EventList and EventSummary, and
	// written by Reset and Suspend (nil: none; they record nothing).
	Events *events.Log
	// Closer, if not nil, is called by Close.
	Closer func() error
}

// unknownLimit is the error of a reset naming a limit the configuration
// does not have; it is policy.ErrUnknownLimit.
type unknownLimit string

func (u unknownLimit) Error() string      { return fmt.Sprintf("no limit named %q", string(u)) }
func (unknownLimit) Is(target error) bool { return target == policy.ErrUnknownLimit }

func (l *Local) rate(ctx context.Context, key string) ([]policy.KeyRate, error) {
	return l.Engine.Lookup(ctx, time.Now(), key)
}

func (l *Local) rates(ctx context.Context, top int, over bool) ([]policy.KeyRate, error) {
	all, err := l.Engine.All(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	return TopRates(all, top, over), nil
}

func (l *Local) reset(ctx context.Context, key, limit string) (ResetResult, error) {
	n, err := l.Engine.Reset(ctx, key, limit)
	if errors.Is(err, policy.ErrUnknownLimit) {
		err = unknownLimit(limit)
	}
	if err == nil {
		l.Events.Record(events.Event{Key: key, Limit: limit, Action: events.Reset,
			By: l.by(LocalUser() + ", offline CLI"), Detail: plural.N(n, "rate state") + " removed"})
	}
	return ResetResult{Key: key, Limit: limit, Removed: n}, err
}

// Rate implements Backend.
func (l *Local) Rate(key string) ([]policy.KeyRate, error) { return l.rate(context.Background(), key) }

// Rates implements Backend.
func (l *Local) Rates(top int, over bool) ([]policy.KeyRate, error) {
	return l.rates(context.Background(), top, over)
}

// Reset implements Backend.
func (l *Local) Reset(key, limit string) (ResetResult, error) {
	return l.reset(context.Background(), key, limit)
}

// Close implements Backend.
func (l *Local) Close() error {
	if l.Closer == nil {
		return nil
	}
	return l.Closer()
}

// TopRates sorts by closeness to the limit (rate/max, descending) and keeps
// the first top (0 = all), only those refused now when over is set.
func TopRates(all []policy.KeyRate, top int, over bool) []policy.KeyRate {
	out := all[:0]
	for _, k := range all {
		if !over || k.Refusing {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		fi, fj := out[i].Rate/out[i].Max, out[j].Rate/out[j].Max
		if fi != fj {
			return fi > fj
		}
		return out[i].Key < out[j].Key
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// Rate implements Backend.
func (c *Client) Rate(key string) ([]policy.KeyRate, error) {
	var out []policy.KeyRate
	err := c.Do("GET", "/v1/rate?key="+url.QueryEscape(key), nil, &out)
	return out, err
}

// Rates implements Backend.
func (c *Client) Rates(top int, over bool) ([]policy.KeyRate, error) {
	q := url.Values{"top": {strconv.Itoa(top)}}
	if over {
		q.Set("over", "1")
	}
	var out []policy.KeyRate
	err := c.Do("GET", "/v1/rates?"+q.Encode(), nil, &out)
	return out, err
}

// Reset implements Backend.
func (c *Client) Reset(key, limit string) (ResetResult, error) {
	var out ResetResult
	err := c.Do("POST", "/v1/rate/reset?"+url.Values{"key": {key}, "limit": {limit}}.Encode(), nil, &out)
	return out, err
}

// Close implements Backend; a Client holds nothing to release.
func (c *Client) Close() error { return nil }

// LocalUser names the user running this process, for the audit trail of
// commands that act without the daemon: "alice (uid 1000)".
func LocalUser() string {
	uid := os.Getuid()
	if u, err := user.LookupId(fmt.Sprint(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}
