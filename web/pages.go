package web

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

//go:embed templates
var templateFiles embed.FS

var funcs = template.FuncMap{
	"when":     when,
	"ago":      ago,
	"num":      human.Number,
	"rate":     admin.FormatKeyRate,
	"answer":   admin.AnswerLine,
	"dur":      dur,
	"keyURL":   func(k string) string { return "/keys/" + url.PathEscape(k) },
	"chartURL": func(k, w string) string { return "/chart.png?" + url.Values{"key": {k}, "window": {w}}.Encode() },
	"showing":  showing,
	"clean":    termsafe.Line,
	"join":     strings.Join,
	"size":     size,
	"span":     span,
}

// parsePages parses each page's template with "layout" and "partials".
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	names, _ := templateFiles.ReadDir("templates")
	for _, n := range names {
		if name := strings.TrimSuffix(n.Name(), ".html"); name != "layout" && name != "partials" {
			pages[name] = template.Must(template.New("layout.html").Funcs(funcs).
				ParseFS(templateFiles, "templates/layout.html", "templates/partials.html", "templates/"+n.Name()))
		}
	}
	return pages
}

// render writes page name with data (User and Path added) and status
// data["Code"] (default 200), buffered so a template error answers 500;
// the page goes through termsafe.Text, the one cleaner of every field.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, data map[string]any) {
	t, ok := s.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	if u := currentUser(r); u.Name != "" {
		data["User"] = u
	}
	data["Path"] = r.URL.Path
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		s.log.Error("console: template", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	code, _ := data["Code"].(int)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(cmp.Or(code, http.StatusOK))
	io.WriteString(w, termsafe.Text(b.String()))
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	s.log.Warn("console: request failed", "path", r.URL.Path, "user", currentUser(r).Name, "err", err)
	s.render(w, r, "error", map[string]any{"Title": http.StatusText(code), "Message": err.Error(), "Code": code})
}

// maxOverviewKeys bounds the keys the overview lists as refused.
const maxOverviewKeys = 500

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, now := r.Context(), s.opts.Now()
	all, err := s.opts.Services.RateState.All(ctx, now)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("rates: %w", err))
		return
	}
	sc := currentUser(r).Scope
	all = keep(sc, all, sc.allowsRate)
	tracked := len(all)
	over := admin.TopRates(all, 0, true) // as `ratelimitd rate list --over`
	refused, err := s.refused(r, events.Query{Since: now.Add(-24 * time.Hour), Actions: events.Refusals, Max: maxOverviewKeys})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("events: %w", err))
		return
	}
	var st admin.Status
	if s.opts.Services.Status != nil {
		st = s.opts.Services.Status()
	}
	health, err := s.health(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("quarantine: %w", err))
		return
	}
	s.render(w, r, "overview", map[string]any{
		"Title": "Overview", "Now": now, "Over": over, "Tracked": tracked,
		"Refused": refused, "Truncated": len(refused) >= maxOverviewKeys,
		"Quarantine": health, "Status": st,
	})
}

// keyPage shows a key's limits, its chart over ?window= (keyWindow) and
// its recent events.
func (s *Server) keyPage(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	cw, ok := s.keyWindow(w, r, key)
	if !ok {
		return
	}
	rates, err := s.lookup(r, key)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("rates: %w", err))
		return
	}
	evs, err := s.queryEvents(r, events.Query{Key: key, Max: 100})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("events: %w", err))
		return
	}
	s.render(w, r, "key", map[string]any{"Title": key, "Key": key, "Rates": rates, "Events": group(evs),
		"Window": cw, "Windows": chartWindows, "Done": done(r)})
}

// when prints t in UTC to the second; "never" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// span prints first to last (UTC) short for a table cell: "Dec 02
// 15:04:05", "Dec 02 15:04:05–15:09:12" on one day, else "Dec 01
// 23:58–Dec 02 00:03"; when gives the full times.
func span(first, last time.Time) string {
	first, last = first.UTC().Truncate(time.Second), last.UTC().Truncate(time.Second)
	switch {
	case !last.After(first):
		return first.Format("Jan 02 15:04:05")
	case first.YearDay() == last.YearDay() && first.Year() == last.Year():
		return first.Format("Jan 02 15:04:05–") + last.Format("15:04:05")
	}
	return first.Format("Jan 02 15:04–") + last.Format("Jan 02 15:04")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return dur(now.Sub(t)) + " ago"
}

// dur is d rounded to the second as human.Duration prints it; "0s" for
// no time or less.
func dur(d time.Duration) string { return human.Duration(max(d, 0).Round(time.Second)) }

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
