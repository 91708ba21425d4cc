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

//go:embed stack.lua
var stackScript string

//go:embed merge.lua
var mergeScript string

//go:embed cas.lua
var casScript string

// recordScript is prepended to mergeScript and casScript: it reads a rate
// key's record.
//
//go:embed record.lua
var recordScript string

// Options configures New.
type Options struct {
	// Addrs are the Redis addresses (host:port): one for a standalone
	// server, several for a Redis Cluster, or the Sentinels when
	// SentinelMaster is set. At least one is required.
	Addrs []string
	// SentinelMaster names the master set the Sentinels at Addrs
	// monitor; the store follows its failovers.
	SentinelMaster string
	// Username, Password and DB are Redis's AUTH and SELECT parameters
	// (DB is ignored by Redis Cluster). TLS, when set, is used for every
	// connection.
	Username, Password string
	DB                 int
	TLS                *tls.Config
	// Timeout bounds every call (each policy request's script, each CLI
	// read); zero means 200ms.
	Timeout time.Duration
	// KeyPrefix starts every key; it must not contain '{' or '}'. Empty
	// means DefaultKeyPrefix.
	KeyPrefix string
	// Limits returns the parameters of a limit by name, for the expiry of
	// states written by Update and Merge; nil or an unknown name gives
	// them DefaultTTL.
	Limits func(name string) (ratelimit.Limit, bool)
	// UseCallerTime makes EvaluateStack measure at the time it is given
	// instead of Redis TIME: for the conformance tests and replaying
	// traces, never for several daemons sharing state.
	UseCallerTime bool
	// OnBadState, if set, is called (from the deciding goroutine) for
	// every state the decision script found undecodable and replaced
	// by a fresh one, with its limit and rate key.
	OnBadState func(limit, key string)
	// OnRoundTrip, if set, receives the duration of every script call
	// that Redis answered (the round-trip latency).
	OnRoundTrip func(time.Duration)
	// KnownRecords is how many rate keys' records the store remembers
	// for its fast path (the decision made in Go, the script only
	// confirming that the records are still the ones remembered; see
	// "Fast path" in the package documentation): 0 means
	// DefaultKnownRecords, a negative number turns the fast path off.
	KnownRecords int
}

// DefaultKeyPrefix is the key prefix when Options.KeyPrefix is empty.
const DefaultKeyPrefix = "ratelimitd:"

// DefaultTTL is the expiry of a state written for a limit whose parameters
// the store does not know (see Options.Limits).
const DefaultTTL = 7 * 24 * time.Hour

// stateLen is the length of a stored state: int64 seconds, uint32
// nanoseconds, float64 rate, little-endian.
const stateLen = 20

// Store is a rate-state store in Redis. It implements policy.Store and
// policy.StackEvaluator; all methods are safe for concurrent use. Create it
// with New; Close it when done.
type Store struct {
	// cl holds the connection once made (see Open and Connect).
	cl     atomic.Pointer[conn]
	connMu sync.Mutex
	opts   Options
	prefix string
	stack  *rueidis.Lua
	merge  *rueidis.Lua
	cas    *rueidis.Lua
	// offset is Redis's clock minus this host's (ns), as last seen, at
	// offsetAt (this host's Unix ns).
	offset, offsetAt atomic.Int64
	// specs caches the script arguments of each limit
	// (spec -> *[6]string).
	specs sync.Map
	batch batcher
	// routing batches a Redis Cluster's requests per master.
	routing clusterRouting
	// reqs holds *request values for reuse (evaluateOne).
	reqs sync.Pool
	// known holds the records of the fast path (nil: off).
	known *knownRecords
	// fastConfirmed and fastRefused count the fast path's requests
	// (FastPath).
	fastConfirmed, fastRefused atomic.Int64
}

// New connects to Redis (standalone, Sentinel or Cluster) and returns the
// store. It returns an error wrapping ErrConfig for unusable Options, or
// ErrUnavailable when no address answers within the timeout.
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
// ErrUnavailable until Connect succeeds (the daemon starts while Redis is
// unreachable, and its Failover connects from its probe). It returns an
// error wrapping ErrConfig for unusable Options.
func Open(o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no address", ErrConfig)
	}
	if o.Timeout <= 0 {
		o.Timeout = 200 * time.Millisecond
	}
	prefix := o.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix %q contains a brace", ErrConfig, prefix)
	}
	s := &Store{opts: o, prefix: prefix,
		stack: rueidis.NewLuaScript(stackScript),
		merge: rueidis.NewLuaScript(recordScript + mergeScript),
		cas:   rueidis.NewLuaScript(recordScript + casScript)}
	if o.KnownRecords >= 0 {
		s.known = newKnownRecords(cmp.Or(o.KnownRecords, DefaultKnownRecords))
	}
	s.batch.send = func(ctx context.Context, reqs ...*request) (answer, error) {
		return s.exec(ctx, "d", s.clockArg(), "", reqs...)
	}
	return s, nil
}

// conn is a connection made by Connect.
type conn struct {
	c       rueidis.Client
	cluster bool
}

// Connect connects the store if it is not connected yet: it reaches one
// of the addresses (or the master the Sentinels name, or the cluster)
// within the timeout (at least a second) and learns whether it is a
// Redis Cluster. Errors wrap ErrUnavailable. Safe for concurrent use.
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

// errNotConnected is the error of every call before Connect succeeded.
var errNotConnected = fmt.Errorf("%w: not connected", ErrUnavailable)

// client returns the connection, or an error wrapping ErrUnavailable
// before Connect succeeded.
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

// Cluster reports whether the store talks to a Redis Cluster (false
// before Connect succeeded).
func (s *Store) Cluster() bool {
	c := s.cl.Load()
	return c != nil && c.cluster
}

// Timeout is the bound on every call (Options.Timeout).
func (s *Store) Timeout() time.Duration { return s.opts.Timeout }

// ClockOffset is Redis's clock minus this host's, as last measured by
// EvaluateStack (zero before the first request): Failover decides locally
// on the host's clock plus this offset.
func (s *Store) ClockOffset() time.Duration { return time.Duration(s.offset.Load()) }

// Ping checks that Redis answers within the timeout and returns its clock.
// Errors wrap ErrUnavailable, or ErrProtocol for a TIME answer it cannot
// read.
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
	if !s.opts.UseCallerTime {
		s.offset.Store(int64(time.Until(now)))
		s.offsetAt.Store(time.Now().UnixNano())
	}
	return now, nil
}

// Now is Redis's clock: TIME when Redis answers, else this host's clock
// corrected by the offset last measured (the `rate` commands measure on
// it, as the decisions do).
func (s *Store) Now(ctx context.Context) time.Time {
	if now, err := s.Ping(ctx); err == nil {
		return now
	}
	return time.Now().Add(s.ClockOffset())
}

// Key returns the Redis key of rate key key's record: PREFIX + "{" + key
// + "}", with '%', '{' and '}' in key percent-escaped and the empty key
// written "%" (an empty hash tag is no hash tag).
func (s *Store) Key(key string) string {
	if key != "" && strings.IndexAny(key, "%{}") < 0 {
		return s.prefix + "{" + key + "}" // one allocation
	}
	return string(s.appendKey(nil, key))
}

// appendKey appends Key(key) to b.
func (s *Store) appendKey(b []byte, key string) []byte {
	b = append(b, s.prefix...)
	if key == "" {
		return append(b, "{%}"...)
	}
	b = append(b, '{')
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%', '{', '}':
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '}')
}

const hexDigits = "0123456789ABCDEF"

// parseKey is the inverse of Key; ok is false for a key of another
// shape (a merge marker, another program's key).
func (s *Store) parseKey(k string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(k, s.prefix)
	if !ok || len(rest) < 2 || rest[0] != '{' || strings.IndexByte(rest, '}') != len(rest)-1 {
		return "", false
	}
	esc := rest[1 : len(rest)-1]
	if esc == "%" {
		return "", true
	}
	var b strings.Builder
	for i := 0; i < len(esc); i++ {
		if esc[i] == '%' && i+2 < len(esc) {
			v, err := strconv.ParseUint(esc[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		b.WriteByte(esc[i])
	}
	return b.String(), true
}

// encode and decode convert a State to and from its 20-byte Redis form.
func encode(st ratelimit.State) string {
	sec, nsec := splitNs(st.Time)
	var b [stateLen]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(sec))
	binary.LittleEndian.PutUint32(b[8:], uint32(nsec))
	binary.LittleEndian.PutUint64(b[12:], math.Float64bits(st.Rate))
	return string(b[:])
}

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

// splitNs splits Unix nanoseconds into seconds and a non-negative
// nanosecond remainder.
func splitNs(t int64) (sec, nsec int64) {
	sec, nsec = t/1e9, t%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec
}

// Get returns the state of key under limit (zero if none). Errors wrap
// ErrUnavailable (Redis did not answer in time) or ErrProtocol.
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

// readRaw returns the state of key under limit in key's record ("" for
// none; a value that is not a record holds none).
func (s *Store) readRaw(ctx context.Context, c rueidis.Client, limit, key string) (string, error) {
	v, err := c.Do(ctx, c.B().Get().Key(s.Key(key)).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) && !wrongType(err) {
		return "", unavailable(err)
	}
	return recordState(v, limit), nil
}

// wrongType reports whether err is Redis's WRONGTYPE error (a key of
// another type than the command's).
func wrongType(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(e.Error(), "WRONGTYPE")
}

// Delete forgets key under limit and reports whether it had state: `rate
// reset`, seen by every host at once. Errors wrap ErrUnavailable.
func (s *Store) Delete(ctx context.Context, limit, key string) (bool, error) {
	c, err := s.client()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	for range 16 {
		raw, err := s.readRaw(ctx, c, limit, key)
		if err != nil {
			return false, err
		}
		if raw == "" {
			return false, nil
		}
		done, err := s.cas.Exec(ctx, c, []string{s.Key(key)}, []string{limit, raw, "", "0"}).AsInt64()
		if err != nil {
			return false, unavailable(err)
		}
		if done == 1 {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: delete of %s %q kept racing", ErrUnavailable, limit, key)
}

// Update applies fn to the current state of key under limit and stores its
// result with a compare-and-set script, retrying (up to 16 times) when
// another writer changed the state in between. The state expires as
// Options.Limits says. It is not on the daemon's request path
// (EvaluateStack is). Errors wrap ErrProtocol (the stored state cannot
// be read) or ErrUnavailable (also when all 16 attempts raced).
func (s *Store) Update(ctx context.Context, limit, key string, fn func(old ratelimit.State) (ratelimit.State, bool)) error {
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
		old, err := decode(raw)
		if err != nil {
			return err
		}
		next, ok := fn(old)
		if !ok {
			return nil
		}
		l, known := s.limit(limit)
		at := s.expiry(l, known, next)
		done, err := s.cas.Exec(ctx, c, []string{k}, []string{limit, raw, encode(next), strconv.FormatInt(at, 10)}).AsInt64()
		if err != nil {
			return unavailable(err)
		}
		if done == 1 {
			return nil
		}
	}
	return fmt.Errorf("%w: update of %s kept racing", ErrUnavailable, k)
}

// limit returns the parameters of the named limit (Options.Limits); known
// is false when the store does not know them.
func (s *Store) limit(name string) (l ratelimit.Limit, known bool) {
	if s.opts.Limits == nil {
		return ratelimit.Limit{}, false
	}
	return s.opts.Limits(name)
}

// expiry is when st, stored under the limit l, has decayed to negligible
// (ratelimit.Limit.Negligible), in Unix milliseconds on Redis's clock;
// DefaultTTL from now when l is not known. It is never earlier than a
// millisecond from now.
func (s *Store) expiry(l ratelimit.Limit, known bool, st ratelimit.State) int64 {
	now := time.Now().Add(s.ClockOffset())
	at := now.Add(DefaultTTL).UnixMilli()
	if known {
		at = expiryOf(l, st)
	}
	return max(at, now.UnixMilli()+1)
}

// expiryOf is the Unix millisecond at which st is negligible under l (at
// or after; rounded up).
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

// earrrlLambda is EARRRL's decay constant in 1/ns (ratelimit's lambda).
func earrrlLambda(l ratelimit.Limit) float64 {
	if l.HalfLife > 0 {
		return math.Ln2 / float64(l.HalfLife)
	}
	return 1 / float64(l.Period)
}

// Range calls fn for every stored state, found with SCAN on every master,
// until fn returns false. Keys of other shapes under the prefix are
// skipped, and so are values of the wrong length. The view is not a
// snapshot: states written during the scan may or may not be seen. Errors
// wrap ErrUnavailable.
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

// masters returns a client per node holding primary data: the one node,
// or every cluster master.
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

// scan calls fn for every entry of every record on node n; values that
// do not parse are skipped.
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
		var res []rueidis.RedisResult
		if len(cmds) > 0 {
			res = n.DoMulti(cctx, cmds...)
		}
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

// MarkerTTL is how long Merge's marker of an outage lives in Redis: a
// merge retried (or restarted with the daemon) within it adds nothing
// twice.
const MarkerTTL = 7 * 24 * time.Hour

// Merge adds what this host counted alone during the outage outage (an
// identifier unique to the host and the outage) to the shared states of
// limit: deltas[i] is the state of keys[i] counted from no state with
// the outage's local requests only. Each key's sum is the limit's own
// (merge.lua: decayed rates or counts added, GCRA's backlog added to the
// arrival time) and is made at most once per (outage, limit, key): a
// marker beside the key, written by the same script, makes a retried or
// restarted merge skip the keys already done. It returns how many states
// were added, and with it an error wrapping ErrUnavailable if a chunk
// failed (the keys of the failed chunk may be retried). A limit
// Options.Limits does not know is added as an exponential one with a
// period of half DefaultTTL.
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
	markerTTL := strconv.FormatInt(MarkerTTL.Milliseconds(), 10)
	// Pipelined in chunks: an outage may leave a million states to add.
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
			execs = append(execs, rueidis.LuaExec{Keys: []string{k, k + limit + "#" + outage}, Args: args})
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

// unavailable wraps a client error in ErrUnavailable (Redis down, slow,
// failing over, or answering with an error).
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrProtocol) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}
