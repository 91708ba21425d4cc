package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Backend answers the rate, quarantine and event commands: a Client or a
// Local. Error texts are fit for the operator.
type Backend interface {
	// Rate returns each limit's rate of key; Rates at most top (0: all)
	// rates, nearest their limits first.
	Rate(ctx context.Context, key string) ([]policy.KeyRate, error)
	Rates(ctx context.Context, top int, over bool) ([]policy.KeyRate, error)
	// Reset forgets key's rate under limit ("": every limit).
	Reset(ctx context.Context, key, limit string) (ResetResult, error)
	// List returns the quarantined messages lq selects, newest first.
	List(ctx context.Context, lq ListQuery) ([]quarantine.Entry, error)
	// Show returns one quarantined message; quarantine.ErrNotFound.
	Show(ctx context.Context, id string, raw bool) (ShowResult, error)
	// Act thaws (else deletes) the messages sel selects, one outcome each.
	Act(ctx context.Context, thaw bool, sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	// Suspend suspends or resumes the automatic release of key's mail.
	Suspend(ctx context.Context, key string, resume bool) (SuspendResult, error)
	// EventList returns the events q selects, newest first; EventSummary
	// sums them per key.
	EventList(ctx context.Context, q events.Query) ([]events.Event, error)
	EventSummary(ctx context.Context, q events.Query) ([]events.KeySummary, error)
	Close() error // a Local one closes the file
}

// With runs fn on a Client of the daemon at socket, else on offline()'s
// backend, and closes it; it returns the first error.
func With(socket string, offline func() (Backend, error), fn func(Backend) error) error {
	var b Backend = NewClient(socket)
	if _, err := b.(*Client).Status(context.Background()); errors.Is(err, ErrNoDaemon) {
		if b, err = offline(); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	err := fn(b)
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

// ShowResult is the answer to GET /v1/quarantine/{id}; Error says why
// content is missing.
type ShowResult struct {
	Entry quarantine.Entry `json:"entry"`
	Body  string           `json:"body"`
	Error string           `json:"error,omitempty"`
}

// SuspendRequest is the body of POST /v1/quarantine/suspend.
type SuspendRequest struct {
	Key    string `json:"key"`
	Resume bool   `json:"resume,omitempty"`
}

// SuspendResult answers it; Was: the key was suspended.
type SuspendResult struct {
	Key       string `json:"key"`
	Suspended bool   `json:"suspended"`
	Was       bool   `json:"was_suspended,omitempty"`
}

// Local is the Backend on this process's services (the daemon's, or the
// state file the CLI opened), for the admin API and the console.
// Quarantine, Events, Logger (audit of rate resets), Notify, Status and
// Limits may be nil; By names who acts ("": the local user). Safe for
// concurrent use as far as its services are.
type Local struct {
	RateState  Rates
	Quarantine Quarantine
	Events     Events
	By         string
	Logger     *slog.Logger
	Notify     func(notify.Event)
	Status     func() Status
	Limits     func() []policy.LimitInfo
	Closer     func() error // called by Close, if not nil
}

func (l *Local) eventLog() Events {
	if lg, ok := l.Events.(*events.Log); l.Events == nil || ok && lg == nil {
		return nil
	}
	return l.Events
}

func (l *Local) record(e events.Event) {
	if ev := l.eventLog(); ev != nil {
		ev.Record(e)
	}
}

type unknownLimit string

func (u unknownLimit) Error() string      { return fmt.Sprintf("no limit named %q", string(u)) }
func (unknownLimit) Is(target error) bool { return target == policy.ErrUnknownLimit }

// Rate implements Backend.
func (l *Local) Rate(ctx context.Context, key string) ([]policy.KeyRate, error) {
	return l.RateState.Lookup(ctx, time.Now(), key)
}

// Rates implements Backend.
func (l *Local) Rates(ctx context.Context, top int, over bool) ([]policy.KeyRate, error) {
	all, err := l.RateState.All(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	return TopRates(all, top, over), nil
}

// Reset implements Backend.
func (l *Local) Reset(ctx context.Context, key, limit string) (ResetResult, error) {
	n, err := l.RateState.Reset(ctx, key, limit)
	if errors.Is(err, policy.ErrUnknownLimit) {
		err = unknownLimit(limit)
	}
	if err != nil {
		return ResetResult{}, err
	}
	by := l.by(LocalUser() + ", offline CLI")
	l.record(events.Event{Key: key, Limit: limit, Action: events.Reset, By: by, Detail: plural.N(n, "rate state") + " removed"})
	if l.Logger != nil {
		l.Logger.Info("rate reset", "key", key, "limit", limit, "removed", n, "by", by)
	}
	if l.Notify != nil {
		l.Notify(notify.Event{Kind: notify.RateReset, Key: key, Limit: limit, Count: n, By: by})
	}
	return ResetResult{Key: key, Limit: limit, Removed: n}, nil
}

// Close implements Backend.
func (l *Local) Close() error {
	if l.Closer != nil {
		return l.Closer()
	}
	return nil
}

// TopRates sorts all by rate/max, highest first, and keeps top (0: all),
// only refused ones with over. It reuses all.
func TopRates(all []policy.KeyRate, top int, over bool) []policy.KeyRate {
	out := slices.DeleteFunc(all, func(k policy.KeyRate) bool { return over && !k.Refusing })
	slices.SortFunc(out, func(a, b policy.KeyRate) int {
		return cmp.Or(cmp.Compare(b.Rate/b.Max, a.Rate/a.Max), strings.Compare(a.Key, b.Key))
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// Rate implements Backend.
func (c *Client) Rate(ctx context.Context, key string) ([]policy.KeyRate, error) {
	return call[[]policy.KeyRate](ctx, c, "GET", "/v1/rate?key="+url.QueryEscape(key), nil)
}

// Rates implements Backend.
func (c *Client) Rates(ctx context.Context, top int, over bool) ([]policy.KeyRate, error) {
	q := url.Values{"top": {strconv.Itoa(top)}}
	if over {
		q.Set("over", "1")
	}
	return call[[]policy.KeyRate](ctx, c, "GET", "/v1/rates?"+q.Encode(), nil)
}

// Reset implements Backend.
func (c *Client) Reset(ctx context.Context, key, limit string) (ResetResult, error) {
	return call[ResetResult](ctx, c, "POST", "/v1/rate/reset?"+url.Values{"key": {key}, "limit": {limit}}.Encode(), nil)
}

// Close implements Backend; a Client holds nothing to release.
func (c *Client) Close() error { return nil }

// LocalUser names this process's user: "alice (uid 1000)".
func LocalUser() string {
	uid := os.Getuid()
	if u, err := user.LookupId(fmt.Sprint(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// OfDomain returns the rates of mail domain d ("@" optional): keys whose
// first part is an address at d, or d itself, ignoring case.
func OfDomain(kr []policy.KeyRate, d string) []policy.KeyRate {
	d = strings.ToLower(strings.TrimPrefix(d, "@"))
	return slices.DeleteFunc(slices.Clone(kr), func(k policy.KeyRate) bool {
		first, _, _ := strings.Cut(strings.ToLower(k.Key), "|")
		return !strings.HasSuffix(first, "@"+d) && first != d
	})
}

// CountSelected is how many messages a thaw or delete of sel would act on.
func CountSelected(ctx context.Context, b Backend, sel lifecycle.Selection) (int, error) {
	if len(sel.IDs) > 0 {
		return len(sel.IDs), nil
	}
	es, err := b.List(ctx, ListQuery{Sender: sel.Sender, Key: sel.Key})
	n := 0
	for _, e := range es {
		if sel.OlderThan <= 0 || time.Since(e.Created) > sel.OlderThan {
			n++
		}
	}
	return n, err
}
