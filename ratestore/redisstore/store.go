package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// The scripts; recordScript is prepended to mergeScript and casScript.
var (
	//go:embed stack.lua
	stackScript string
	//go:embed confirm.lua
	confirmScript string
	//go:embed merge.lua
	mergeScript string
	//go:embed cas.lua
	casScript string
	//go:embed record.lua
	recordScript string
)

// scriptSources returns the scripts as loaded: record.lua, whose first
// line is the shebang, starts merge's and cas's.
func scriptSources() (stack, confirm, merge, cas string) {
	return stackScript, confirmScript, recordScript + mergeScript, recordScript + casScript
}

// Options configures Open and New.
type Options struct {
	// Addrs (host:port, required): one server, the Cluster nodes, or the
	// Sentinels when SentinelMaster is set.
	Addrs []string
	// SentinelMaster names the master set the Sentinels monitor.
	SentinelMaster string
	// Username, Password and DB are for AUTH and SELECT (no DB on a
	// Cluster); TLS, if set, applies to every connection.
	Username, Password string
	DB                 int
	TLS                *tls.Config
	// Timeout bounds every call; zero means 200ms.
	Timeout time.Duration
	// KeyPrefix starts every key, without '{' or '}'; "" is DefaultKeyPrefix.
	KeyPrefix string
	// Limits looks limits up by name for the expiry of states written by
	// Update and Merge; unknown ones get DefaultTTL.
	Limits func(name string) (ratelimit.Limit, bool)
	// OnBadState, if set, is called for each undecodable state replaced.
	OnBadState func(limit, key string)
	// OnRoundTrip, if set, receives each answered script call's duration.
	OnRoundTrip func(time.Duration)
	// KnownRecords is how many records the fast path remembers: 0 means
	// DefaultKnownRecords, negative turns the fast path off.
	KnownRecords int

	// callerTime makes EvaluateStack use its now, not Redis TIME (tests).
	callerTime bool
}

// DefaultKeyPrefix is the key prefix when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "ratelimitd:"

// DefaultTTL is the expiry of a state of a limit unknown to Options.Limits.
const DefaultTTL = 7 * 24 * time.Hour

// stateLen is the length of an encoded state (see package doc).
const stateLen = 20

// Store is a rate-state store in Redis, safe for concurrent use.
type Store struct {
	cl      atomic.Pointer[conn] // set by Connect
	connMu  sync.Mutex
	opts    Options
	prefix  string
	stack   *rueidis.Lua
	confirm *rueidis.Lua
	merge   *rueidis.Lua
	cas     *rueidis.Lua
	// offset is Redis's clock minus this host's (ns), at offsetAt (Unix ns).
	offset, offsetAt atomic.Int64
	specs            sync.Map // spec -> *[6]string, its script arguments
	batch            batcher
	reqs             sync.Pool     // *request, for reuse by EvaluateStack
	known            *knownRecords // the fast path's; nil when off
	// fastConfirmed and fastRefused count the fast path's requests.
	fastConfirmed, fastRefused atomic.Int64
}

// New returns a store connected to Redis (standalone, Sentinel or
// Cluster). Errors wrap ErrConfig or ErrUnavailable.
func New(ctx context.Context, o Options) (*Store, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	if err := s.Connect(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open returns the store without connecting: calls fail with
// ErrUnavailable until Connect succeeds. Errors wrap ErrConfig.
func Open(o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no address", ErrConfig)
	}
	if o.Timeout <= 0 {
		o.Timeout = 200 * time.Millisecond
	}
	prefix := cmp.Or(o.KeyPrefix, DefaultKeyPrefix)
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q contains a brace", ErrConfig, prefix)
	}
	stack, confirm, merge, cas := scriptSources()
	s := &Store{opts: o, prefix: prefix,
		stack:   rueidis.NewLuaScript(stack),
		confirm: rueidis.NewLuaScript(confirm),
		merge:   rueidis.NewLuaScript(merge),
		cas:     rueidis.NewLuaScript(cas)}
	if o.KnownRecords >= 0 {
		s.known = newKnownRecords(cmp.Or(o.KnownRecords, DefaultKnownRecords))
	}
	s.reqs.New = func() any { return new(request) }
	s.batch.send = func(ctx context.Context, reqs ...*request) (answer, error) {
		return s.exec(ctx, "d", s.clockArg(), "", reqs...)
	}
	return s, nil
}

type conn struct {
	c       rueidis.Client
	cluster bool
}

// Connect connects unless connected, within the timeout (at least 1s),
// and learns whether Redis is a Cluster. Errors wrap ErrUnavailable.
func (s *Store) Connect(ctx context.Context) error {
	if s.cl.Load() != nil {
		return nil
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.cl.Load() != nil {
		return nil
	}
	o := s.opts
	co := rueidis.ClientOption{
		InitAddress:      o.Addrs,
		Username:         o.Username,
		Password:         o.Password,
		SelectDB:         o.DB,
		TLSConfig:        o.TLS,
		DisableCache:     true,
		ConnWriteTimeout: max(o.Timeout, time.Second),
		Dialer:           netDialer(o.Timeout),
		DisableRetry:     true,
		MaxFlushDelay:    20 * time.Microsecond,
	}
	if o.SentinelMaster != "" {
		co.Sentinel = rueidis.SentinelOption{MasterSet: o.SentinelMaster, Username: o.Username, Password: o.Password,
			TLSConfig: o.TLS, Dialer: netDialer(o.Timeout)}
	}
	c, err := rueidis.NewClient(co)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cctx, cancel := context.WithTimeout(ctx, max(o.Timeout, time.Second))
	defer cancel()
	info, err := c.Do(cctx, c.B().Info().Section("cluster").Build()).ToString()
	if err != nil {
		c.Close()
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.cl.Store(&conn{c: c, cluster: strings.Contains(info, "cluster_enabled:1")})
	return nil
}

var errNotConnected = fmt.Errorf("%w: not connected", ErrUnavailable)

func (s *Store) client() (rueidis.Client, error) {
	if c := s.cl.Load(); c != nil {
		return c.c, nil
	}
	return nil, errNotConnected
}

// Close closes the connections.
func (s *Store) Close() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c := s.cl.Swap(nil); c != nil {
		c.c.Close()
	}
}

// Connected reports whether Connect has succeeded.
func (s *Store) Connected() bool { return s.cl.Load() != nil }

// Cluster reports whether the store is connected to a Redis Cluster.
func (s *Store) Cluster() bool {
	c := s.cl.Load()
	return c != nil && c.cluster
}

// ClockOffset is Redis's clock minus this host's, as last measured.
func (s *Store) ClockOffset() time.Duration { return time.Duration(s.offset.Load()) }

// Ping returns Redis's clock (TIME), asked within the timeout. Errors
// wrap ErrUnavailable or ErrProtocol.
func (s *Store) Ping(ctx context.Context) (time.Time, error) {
	c, err := s.client()
	if err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	v, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		return time.Time{}, unavailable(err)
	}
	if len(v) != 2 {
		return time.Time{}, fmt.Errorf("%w: TIME answered %q", ErrProtocol, v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("%w: TIME answered %q", ErrProtocol, v)
	}
	now := time.Unix(sec, usec*1000)
	if !s.opts.callerTime {
		s.offset.Store(int64(time.Until(now)))
		s.offsetAt.Store(time.Now().UnixNano())
	}
	return now, nil
}

// RedisTime is Ping's answer, or this host's clock plus ClockOffset.
func (s *Store) RedisTime(ctx context.Context) time.Time {
	if now, err := s.Ping(ctx); err == nil {
		return now
	}
	return time.Now().Add(s.ClockOffset())
}

// Key returns the Redis key of rate key key's record: PREFIX + "{" + key
// + "}", with '%', '{' and '}' in key percent-escaped and the empty key
// written "%" (an empty hash tag is no hash tag).
func (s *Store) Key(key string) string {
	if key == "" {
		return s.prefix + "{%}"
	}
	return s.prefix + "{" + keyEscaper.Replace(key) + "}" // one allocation unless escaped
}

func (s *Store) appendKey(b []byte, key string) []byte {
	b = append(b, s.prefix...)
	if key == "" {
		return append(b, "{%}"...)
	}
	b = append(b, '{')
	b = append(b, keyEscaper.Replace(key)...)
	return append(b, '}')
}

// keyEscaper and keyUnescaper make and undo the escapes of Key.
var (
	keyEscaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// parseKey is the inverse of Key; ok is false for keys Key does not write.
func (s *Store) parseKey(k string) (key string, ok bool) {
	esc, ok1 := strings.CutPrefix(k, s.prefix+"{")
	esc, ok2 := strings.CutSuffix(esc, "}")
	if !ok1 || !ok2 {
		return "", false
	}
	if esc != "%" {
		key = keyUnescaper.Replace(esc)
	}
	return key, s.Key(key) == k
}

func encode(st ratelimit.State) string {
	sec, nsec := splitNs(st.Time)
	var b [stateLen]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(sec))
	binary.LittleEndian.PutUint32(b[8:], uint32(nsec))
	binary.LittleEndian.PutUint64(b[12:], math.Float64bits(st.Rate))
	return string(b[:])
}

// decode is the inverse of encode; "" is the zero state.
func decode(v string) (ratelimit.State, error) {
	if v == "" {
		return ratelimit.State{}, nil
	}
	if len(v) != stateLen {
		return ratelimit.State{}, fmt.Errorf("%w: state of %d bytes", ErrProtocol, len(v))
	}
	sec := int64(binary.LittleEndian.Uint64([]byte(v[0:8])))
	nsec := int64(binary.LittleEndian.Uint32([]byte(v[8:12])))
	rate := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[12:20])))
	return ratelimit.State{Time: sec*1e9 + nsec, Rate: rate}, nil
}

// splitNs splits Unix ns into seconds and a non-negative remainder.
func splitNs(t int64) (sec, nsec int64) {
	sec, nsec = t/1e9, t%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec
}

// Get returns the state of key under limit (zero if none). Errors wrap
// ErrUnavailable or ErrProtocol.
func (s *Store) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	c, err := s.client()
	if err != nil {
		return ratelimit.State{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	v, err := s.readRaw(ctx, c, limit, key)
	if err != nil {
		return ratelimit.State{}, err
	}
	return decode(v)
}

// readRaw returns key's state under limit from its record ("" if none).
// records reads the records of entries' keys, by key; a missing record
// or another program's value reads "".
func (s *Store) records(ctx context.Context, entries []pendingEntry) (map[string]string, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	cmds := make(rueidis.Commands, len(entries))
	for i, e := range entries {
		cmds[i] = c.B().Get().Key(s.Key(e.Key)).Build()
	}
	out := make(map[string]string, len(entries))
	for i, r := range c.DoMulti(ctx, cmds...) {
		v, err := r.ToString()
		if err != nil && !rueidis.IsRedisNil(err) && !wrongType(err) {
			return nil, unavailable(err)
		}
		out[entries[i].Key] = v
	}
	return out, nil
}

func (s *Store) readRaw(ctx context.Context, c rueidis.Client, limit, key string) (string, error) {
	v, err := c.Do(ctx, c.B().Get().Key(s.Key(key)).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) && !wrongType(err) {
		return "", unavailable(err)
	}
	return recordState(v, limit), nil
}

func wrongType(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(e.Error(), "WRONGTYPE")
}

// Delete forgets key under limit and reports whether it had state.
// Errors wrap ErrUnavailable.
func (s *Store) Delete(ctx context.Context, limit, key string) (bool, error) {
	var old string
	err := s.swap(ctx, limit, key, func(raw string) (string, int64, bool) {
		old = raw
		return "", 0, raw != ""
	})
	if err != nil || old == "" {
		return false, err
	}
	// The reset marker lives as long as the state would have: no host
	// restores or merges its older copy meanwhile (Failover, merge.lua).
	st, err := decode(old)
	if err != nil {
		return true, err
	}
	c, err := s.client()
	if err != nil {
		return true, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	k := s.Key(key)
	at := time.UnixMilli(s.expiry(limit, st))
	if err := c.Do(cctx, c.B().Set().Key(resetMarker(k, limit)).Value("1").Pxat(at).Build()).Error(); err != nil {
		return true, unavailable(err)
	}
	return true, nil
}

// resetMarker is the key of record k's marker of limit's last reset.
func resetMarker(k, limit string) string { return k + limit + "#reset" }

// Update stores fn's result for key under limit by compare-and-set (up to
// 16 attempts). Errors wrap ErrProtocol or ErrUnavailable.
func (s *Store) Update(ctx context.Context, limit, key string, fn func(old ratelimit.State) (ratelimit.State, bool)) error {
	var err error
	serr := s.swap(ctx, limit, key, func(raw string) (string, int64, bool) {
		var old ratelimit.State
		if old, err = decode(raw); err != nil {
			return "", 0, false
		}
		next, ok := fn(old)
		if !ok {
			return "", 0, false
		}
		return encode(next), s.expiry(limit, next), true
	})
	return cmp.Or(err, serr)
}

// swap stores fn's result (cas.lua; "" deletes, at is the expiry in Unix
// ms) unless fn returns false, retrying on races.
func (s *Store) swap(ctx context.Context, limit, key string, fn func(raw string) (next string, at int64, ok bool)) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	k := s.Key(key)
	for range 16 {
		raw, err := s.readRaw(ctx, c, limit, key)
		if err != nil {
			return err
		}
		next, at, ok := fn(raw)
		if !ok {
			return nil
		}
		done, err := s.cas.Exec(ctx, c, []string{k}, []string{limit, raw, next, strconv.FormatInt(at, 10)}).AsInt64()
		if err != nil {
			return unavailable(err)
		}
		if done == 1 {
			return nil
		}
	}
	return fmt.Errorf("%w: update of %s %q kept racing", ErrUnavailable, limit, key)
}

func (s *Store) limit(name string) (l ratelimit.Limit, known bool) {
	if s.opts.Limits == nil {
		return ratelimit.Limit{}, false
	}
	return s.opts.Limits(name)
}

// expiry is expiryOf (or DefaultTTL) in Unix ms on Redis's clock, > now.
func (s *Store) expiry(limit string, st ratelimit.State) int64 {
	now := time.Now().Add(s.ClockOffset())
	at := now.Add(DefaultTTL).UnixMilli()
	if l, known := s.limit(limit); known {
		at = expiryOf(l, st)
	}
	return max(at, now.UnixMilli()+1)
}

// expiryOf is the Unix ms (rounded up) from which st is negligible.
func expiryOf(l ratelimit.Limit, st ratelimit.State) int64 {
	period := float64(l.Period)
	var ns float64 // after st.Time
	switch l.Algorithm {
	case ratelimit.GCRA:
	case ratelimit.Cooldown:
		ns = period
	case ratelimit.EARRRL:
		lambda := earrrlLambda(l)
		ns = math.Max(math.Log(st.Rate*lambda*period/(l.Limit*1e-6))/lambda, 0)
	default:
		ns = math.Max(math.Log(2*st.Rate), 2) * period
	}
	return (st.Time+int64(math.Min(ns, float64(math.MaxInt64/2))))/1e6 + 1
}

// earrrlLambda is EARRRL's decay constant in 1/ns.
func earrrlLambda(l ratelimit.Limit) float64 {
	if l.HalfLife > 0 {
		return math.Ln2 / float64(l.HalfLife)
	}
	return 1 / float64(l.Period)
}

// Range calls fn for every stored state (SCAN on every master) until fn
// returns false; not a snapshot. Errors wrap ErrUnavailable.
func (s *Store) Range(ctx context.Context, fn func(limit, key string, st ratelimit.State) bool) error {
	nodes, err := s.masters(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		cont, err := s.scan(ctx, n, fn)
		if err != nil || !cont {
			return err
		}
	}
	return nil
}

func (s *Store) masters(ctx context.Context) ([]rueidis.Client, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	if !s.Cluster() {
		return []rueidis.Client{c}, nil
	}
	var out []rueidis.Client
	for _, n := range c.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		role, err := n.Do(cctx, n.B().Arbitrary("ROLE").Build()).ToArray()
		cancel()
		if err != nil {
			return nil, unavailable(err)
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// scan calls fn for every entry of every record on node n.
func (s *Store) scan(ctx context.Context, n rueidis.Client, fn func(limit, key string, st ratelimit.State) bool) (bool, error) {
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		e, err := n.Do(cctx, n.B().Scan().Cursor(cursor).Match(s.prefix+"{*").Count(1000).Type("string").Build()).AsScanEntry()
		if err != nil {
			cancel()
			return false, unavailable(err)
		}
		var keys []string
		cmds := make(rueidis.Commands, 0, len(e.Elements))
		for _, k := range e.Elements {
			if key, ok := s.parseKey(k); ok {
				keys = append(keys, key)
				cmds = append(cmds, n.B().Get().Key(k).Build())
			}
		}
		res := n.DoMulti(cctx, cmds...) // nil for no commands
		cancel()
		for i, key := range keys {
			v, err := res[i].ToString()
			if rueidis.IsRedisNil(err) || wrongType(err) {
				continue // expired or reset since SCAN
			}
			if err != nil {
				return false, unavailable(err)
			}
			cont := true
			recordEach(v, func(name, state string) bool {
				if st, err := decode(state); err == nil {
					cont = fn(name, key, st)
				}
				return cont
			})
			if !cont {
				return false, nil
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			return true, nil
		}
	}
}

// markerTTL is how long Merge's outage marker lives.
const markerTTL = 7 * 24 * time.Hour

// Merge adds this host's counts of outage (unique per host and outage)
// to the shared states of limit: deltas[i] is keys[i]'s (merge.lua),
// counted once per marker. It returns the states added; errors wrap
// ErrUnavailable.
func (s *Store) Merge(ctx context.Context, outage, limit string, keys []string, deltas []ratelimit.State) (int, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	l, ok := s.limit(limit)
	if !ok {
		l = ratelimit.Limit{Limit: 1, Period: DefaultTTL / 2}
	}
	tau := float64(l.Period)
	if l.Algorithm == ratelimit.EARRRL {
		tau = 1 / earrrlLambda(l)
	}
	spec := []string{strconv.Itoa(int(l.Algorithm)), strconv.FormatFloat(l.Limit, 'g', -1, 64),
		strconv.FormatInt(int64(l.Period), 10), strconv.FormatFloat(tau, 'g', -1, 64)}
	markerTTL := strconv.FormatInt(markerTTL.Milliseconds(), 10)
	// Pipelined in chunks: an outage may leave a million states.
	const chunk = 512
	n := 0
	for lo := 0; lo < len(keys); lo += chunk {
		var execs []rueidis.LuaExec
		for i := lo; i < min(lo+chunk, len(keys)); i++ {
			if deltas[i].IsZero() {
				continue
			}
			sec, nsec := splitNs(deltas[i].Time)
			args := append(append(make([]string, 0, 9), spec...), strconv.FormatInt(sec, 10), strconv.FormatInt(nsec, 10),
				strconv.FormatFloat(deltas[i].Rate, 'g', -1, 64), markerTTL, limit)
			k := s.Key(keys[i])
			execs = append(execs, rueidis.LuaExec{Keys: []string{k, k + limit + "#" + outage, resetMarker(k, limit)}, Args: args})
		}
		if len(execs) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout+time.Second)
		res := s.merge.ExecMulti(cctx, c, execs...)
		cancel()
		for _, r := range res {
			v, err := r.AsInt64()
			if err != nil {
				return n, unavailable(err)
			}
			n += int(v)
		}
	}
	return n, nil
}

func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrProtocol) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}
