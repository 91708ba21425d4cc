package web

import (
	"context"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

//go:embed static
var staticFiles embed.FS

// csp allows the console's own styles and images and nothing else.
const csp = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// user is the logged-in user of a request and the mail it may see.
type user struct {
	Name  string
	Role  Role
	CSRF  string
	Scope Scope
	token string
}

// CanAct reports whether the user may act (the templates' buttons).
func (u user) CanAct() bool { return u.Role == Operator }

type userKey struct{}

func currentUser(r *http.Request) user {
	u, _ := r.Context().Value(userKey{}).(user)
	return u
}

// Handler returns the console's routes behind its security headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		s.loginForm(w, r, http.StatusOK, "", r.URL.Query().Get("next"))
	})
	mux.HandleFunc("POST /login", s.login)
	mux.Handle("GET /logout", s.auth(func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, "logout", map[string]any{"Title": "Log out"})
	}))
	mux.Handle("POST /logout", s.auth(s.post(Viewer, s.logout)))
	mux.Handle("GET /{$}", s.auth(s.overview))
	mux.Handle("GET /keys/{key}", s.auth(s.keyPage))
	mux.Handle("GET /chart.png", s.auth(s.chart))
	mux.Handle("POST /keys/{key}/{op}", s.auth(s.post(Operator, s.keyAction)))
	mux.Handle("GET /quarantine", s.auth(s.quarantineList))
	mux.Handle("GET /quarantine/bulk", s.auth(s.bulkConfirm))
	mux.Handle("POST /quarantine/bulk/{op}", s.auth(s.post(Operator, s.bulkAction)))
	mux.Handle("GET /quarantine/{id}", s.auth(s.message))
	mux.Handle("GET /quarantine/{id}/confirm", s.auth(s.confirm))
	mux.Handle("POST /quarantine/{id}/{op}", s.auth(s.post(Operator, s.messageAction)))
	mux.Handle("GET /events", s.auth(s.eventsPage))
	return s.secure(mux)
}

// secure sets the headers every answer carries.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// Not no-referrer: browsers would send "Origin: null" on posts.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if s.TLS() {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// auth passes requests with a live session; others are sent to /login
// (GET) or refused (403).
func (s *Server) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refreshUsers()
		c, err := r.Cookie(cookieName)
		var ss session
		ok := err == nil
		if ok {
			ss, ok = s.sessions.get(c.Value, s.opts.Now())
		}
		var u User
		if ok {
			u, ok = s.users.Load().Lookup(ss.user)
			if ok = ok && u.entryID() == ss.entry; !ok {
				s.sessions.remove(c.Value)
			}
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "not logged in", http.StatusForbidden)
			return
		}
		var limits []policy.LimitInfo
		if len(u.Domains) > 0 && s.opts.Services.Limits != nil {
			limits = s.opts.Services.Limits()
		}
		sc := newScope(u.Domains, limits)
		ctx := context.WithValue(r.Context(), userKey{}, user{Name: u.Name, Role: u.Role, CSRF: ss.csrf, Scope: sc, token: c.Value})
		next(w, r.WithContext(ctx))
	})
}

// post guards a state-changing request: same origin, the session's CSRF
// token in the form field "csrf", and role need; refusals are 403.
func (s *Server) post(need Role, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := currentUser(r)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if !s.sameOrigin(r) {
			s.log.Warn("console: cross-origin POST refused", "user", u.Name, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
			s.forbidden(w, r, "cross-origin request refused")
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		if !validCSRF(session{csrf: u.CSRF}, r.PostForm.Get("csrf")) {
			s.log.Warn("console: POST without a valid CSRF token refused", "user", u.Name, "path", r.URL.Path)
			s.forbidden(w, r, "missing or invalid CSRF token")
			return
		}
		if need == Operator && u.Role != Operator {
			s.log.Warn("console: action refused to a viewer", "user", u.Name, "path", r.URL.Path)
			s.forbidden(w, r, "your role ("+string(u.Role)+") may not act; an operator may")
			return
		}
		next(w, r)
	}
}

// sameOrigin checks the Origin header, if any, against the scheme and host.
func (s *Server) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if o == "null" {
		return false
	}
	scheme := "http"
	if s.TLS() || s.secureRequest(r) {
		scheme = "https"
	}
	ou, err := url.Parse(o)
	return err == nil && ou.Scheme == scheme && strings.EqualFold(ou.Host, r.Host)
}

func (s *Server) forbidden(w http.ResponseWriter, r *http.Request, why string) {
	s.render(w, r, "error", map[string]any{"Title": "Forbidden", "Message": why, "Code": http.StatusForbidden})
}

// secureRequest reports a request over TLS, to us or to a trusted proxy
// that says so with X-Forwarded-Proto.
func (s *Server) secureRequest(r *http.Request) bool {
	_, _, proxy := s.peer(r)
	return r.TLS != nil || proxy && r.Header.Get("X-Forwarded-Proto") == "https"
}

// peer is the request's peer host, its address and whether it is one of
// [web] trusted_proxies.
func (s *Server) peer(r *http.Request) (string, netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	return host, a, err == nil && s.trusted(a)
}

// clientAddr is the peer, or behind trusted proxies the last
// X-Forwarded-For address that is not one.
func (s *Server) clientAddr(r *http.Request) string {
	host, a, proxy := s.peer(r)
	if !proxy {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		p, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if a = p.Unmap(); !s.trusted(a) {
			break
		}
	}
	return a.String()
}

func (s *Server) trusted(a netip.Addr) bool {
	return slices.ContainsFunc(s.opts.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) })
}

const loginCookie = "ratelimitd_login"

// loginForm shows the login form with a token its cookie repeats (login
// CSRF).
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request, code int, msg, next string) {
	tok := randomToken()
	http.SetCookie(w, s.cookie(r, loginCookie, tok, 10*time.Minute))
	s.render(w, r, "login", map[string]any{"Title": "Log in", "CSRF": tok, "Error": msg, "Code": code, "Next": safeNext(next)})
}

// safeNext keeps a redirect on this site: one leading '/', no '\' or
// control characters (browsers drop tabs: "/\t/host" is "//host").
func safeNext(n string) string {
	if !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") ||
		strings.ContainsFunc(n, func(c rune) bool { return c == '\\' || c < ' ' || c == 0x7f }) {
		return "/"
	}
	return n
}

// cookie makes an HttpOnly, SameSite=Strict cookie, Secure with TLS; a
// negative maxAge deletes it.
func (s *Server) cookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	age := int(maxAge / time.Second)
	if maxAge < 0 {
		age = -1
	}
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: age,
		HttpOnly: true, Secure: s.TLS() || s.secureRequest(r), SameSite: http.SameSiteStrictMode}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	c, err := r.Cookie(loginCookie)
	if !s.sameOrigin(r) || err != nil || !validCSRF(session{csrf: c.Value}, r.PostForm.Get("csrf")) {
		s.forbidden(w, r, "the login form expired or came from elsewhere: reload the page")
		return
	}
	name, password := r.PostForm.Get("username"), r.PostForm.Get("password")
	addr := s.clientAddr(r)
	userKey, addrKey := "user:"+name, "addr:"+addr
	again := func(code int, msg string) { s.loginForm(w, r, code, msg, r.PostForm.Get("next")) }
	if d := s.throttle.charge(s.opts.Now(), userKey, addrKey); d > 0 {
		s.log.Warn("console: login attempt while slowed down", "user", name, "client", addr, "wait", d.Round(time.Second).String())
		w.Header().Set("Retry-After", strconv.Itoa(int(d.Seconds()+1)))
		again(http.StatusTooManyRequests, "Too many failed attempts: wait "+d.Round(time.Second).String()+" and try again.")
		return
	}
	s.refreshUsers()
	s.verify <- struct{}{}
	u, ok := s.users.Load().Verify(name, []byte(password))
	<-s.verify
	if !ok {
		s.log.Warn("console: login failed", "user", name, "client", addr)
		again(http.StatusUnauthorized, "Wrong user name or password.")
		return
	}
	s.throttle.succeed(userKey, addrKey)
	tok, _ := s.sessions.create(u, s.opts.Now())
	http.SetCookie(w, s.cookie(r, cookieName, tok, sessionMax))
	http.SetCookie(w, s.cookie(r, loginCookie, "", -1))
	s.log.Info("console: login", "user", u.Name, "role", string(u.Role), "domains", strings.Join(u.Domains, ","), "client", addr)
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	u := currentUser(r)
	s.sessions.remove(u.token)
	http.SetCookie(w, s.cookie(r, cookieName, "", -1))
	s.log.Info("console: logout", "user", u.Name)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
