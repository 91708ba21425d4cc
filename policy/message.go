package policy

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Per-message bookkeeping: each message is charged once per limit however
// often and through which front end the MTA asks (docs/limits.md). Two
// generations bound the memory (a forgotten message is charged again:
// over-, never under-counting).
const (
	msgGenSize   = 1 << 15                // entries of one generation of the table
	shardGenSize = msgGenSize / msgShards // of one shard
	pendMax      = 16                     // one fingerprint's messages waiting to be joined
	msgShards    = 16                     // a power of two
	maxIDLen     = 256                    // key bytes built on the stack
	entryBytes   = 512                    // estimated memory of one entry
)

// frontIndex maps Request.Stage to 0 (policy) or 1 (milter).
func frontIndex(stage string) int {
	if stage == ViaMilter {
		return 1
	}
	return 0
}

// charge is what one message has been charged under one limit.
type charge struct {
	limit     string
	mail      bool    // per_mail or per_conn charged
	byteSeen  bool    // a size has been measured
	bytes     float64 // bytes charged (per_byte)
	rcpts     int     // RCPTs charged (per_rcpt)
	rcptsOK   int     // recipients charged and admitted (compared with recipient_count)
	rcptsSeen [2]int  // RCPT requests seen per front end under this limit
}

// msgEntry is one message in flight. mu guards verdict and charges; the
// other fields are the shard's, under its mutex.
type msgEntry struct {
	mu      sync.Mutex
	shard   *msgShard
	verdict [2]*Decision // per front end, without Measures; nil: Pass
	charges []charge
	id      [2][]byte // message key (appendID) per front end; empty: no view
	hash    [2]uint64 // hash of id with the front end (msgTable.get)
	refs    int32     // slots, pending list and requests holding it
	open    bool      // last request admitted, not END-OF-MESSAGE (nOpen)
	// While waiting for the other front end: join fingerprint, its hash,
	// the front end and generation that registered it.
	pending   bool
	fp        []byte
	fpHash    uint64
	pendFront int
	pendGen   uint64
}

// setVerdict records the message's verdict d for front end front, without
// Repeated, Measures and Fault.
func (m *msgEntry) setVerdict(front int, d Decision) {
	d.Repeated, d.Measures, d.Fault = false, nil, nil
	if v := m.verdict[front]; v != nil {
		*v = d
		return
	}
	m.verdict[front] = &d
}

// chargeOf returns the charge record of limit name, adding one if needed;
// nil without a message.
func (m *msgEntry) chargeOf(name string) *charge {
	if m == nil {
		return nil
	}
	for i := range m.charges {
		if m.charges[i].limit == name {
			return &m.charges[i]
		}
	}
	m.charges = append(m.charges, charge{limit: name})
	return &m.charges[len(m.charges)-1]
}

// msgGen is one generation of the table.
type msgGen struct {
	msgs  map[uint64]*msgEntry   // by hash of the message key
	pend  map[uint64][]*msgEntry // waiting messages, oldest first, by fingerprint hash
	npend int                    // entries in pend's lists
}

// msgTable holds the messages in flight in shards picked by the join
// fingerprint, so every request of a message meets in one shard. Safe for
// concurrent use; the zero value is ready.
type msgTable struct {
	shards [msgShards]msgShard
}

var seed = maphash.MakeSeed() // of join fingerprints and message keys

// msgShard is one shard of the table.
type msgShard struct {
	mu       sync.Mutex
	cur, old msgGen
	gen      uint64       // number of cur; old is gen-1
	inUse    int          // entries referenced
	free     []*msgEntry  // unreferenced entries kept for reuse, at most shardGenSize
	nOpen    atomic.Int64 // entries open (msgEntry.open), for status
}

// appendID appends req's message key: stage, the join fingerprint (client,
// SASL user, sender) and instance (a forged request reusing an instance
// makes its own message).
func appendID(b []byte, req *Request) []byte {
	b = append(append(b, req.Stage...), 0)
	b = append(append(b, req.ClientAddress...), 0)
	b = append(appendLower(b, req.SASLUsername), 0)
	b = append(appendLower(b, req.Sender), 0)
	return append(b, req.Instance...)
}

// appendLower appends s lower-cased as strings.ToLower does.
func appendLower(b []byte, s string) []byte {
	n := len(b)
	b = slices.Grow(b, len(s))[:n+len(s)]
	dst := b[n:]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 { // s[i:] starts a rune; ToLower maps rune by rune
			return append(b[:n+i], strings.ToLower(s[i:])...)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst[i] = c
	}
	return b
}

// get returns the entry of req's message, new (joined to the other front
// end's waiting view when joinable) if need be; nil without an instance.
// Give it back with msgShard.end.
func (tb *msgTable) get(req *Request, joinable bool) *msgEntry {
	if req.Instance == "" {
		return nil
	}
	var buf [maxIDLen]byte
	id := appendID(buf[:0], req)
	fp := id[len(req.Stage)+1 : len(id)-len(req.Instance)-1] // appendID's fingerprint
	fh := maphash.Bytes(seed, fp)
	front := frontIndex(req.Stage)
	t := &tb.shards[fh%msgShards]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur.msgs == nil {
		t.cur = msgGen{msgs: make(map[uint64]*msgEntry), pend: make(map[uint64][]*msgEntry)}
		t.old = msgGen{msgs: make(map[uint64]*msgEntry), pend: make(map[uint64][]*msgEntry)}
		t.gen = 1
	}
	h := maphash.Bytes(seed, id) ^ uint64(front)*0x9e3779b97f4a7c15 // the front end's own
	held, inCur := t.cur.msgs[h]
	if inCur && bytes.Equal(held.id[front], id) {
		held.refs++
		held.hash[front] = h
		return held
	}
	if m, ok := t.old.msgs[h]; ok && bytes.Equal(m.id[front], id) {
		delete(t.old.msgs, h) // the old slot's reference passes to this request
		m.hash[front] = h
		t.put(h, m, held)
		return m
	}
	var m *msgEntry
	if joinable {
		m = t.takePending(fp, fh, 1-front)
	}
	isNew := m == nil
	if isNew {
		t.inUse++
		if n := len(t.free); n > 0 { // reused: BenchmarkRequestPath/decide+reply 1,085 -> 655 ns, 2 -> 0 allocs
			m, t.free = t.free[n-1], t.free[:n-1]
		} else {
			m = &msgEntry{shard: t}
		}
	}
	m.refs++ // this request, first: put may rotate
	m.id[front], m.hash[front] = append(m.id[front][:0], id...), h
	t.put(h, m, held)
	if joinable && isNew {
		t.addPending(m, fp, fh, front)
	}
	return m
}

// unref drops one reference to m; with none left, nothing can reach m
// and it is cleared for reuse.
func (t *msgShard) unref(m *msgEntry) {
	if m.refs--; m.refs > 0 {
		return
	}
	t.inUse--
	t.setOpen(m, false)
	if len(t.free) < shardGenSize {
		m.verdict, m.charges, m.hash = [2]*Decision{}, m.charges[:0], [2]uint64{}
		m.id[0], m.id[1], m.fp = m.id[0][:0], m.id[1][:0], m.fp[:0]
		m.pending, m.fpHash, m.pendFront, m.pendGen = false, 0, 0, 0
		t.free = append(t.free, m)
	}
}

// put stores m under h in the current generation, rotating when full, and
// takes a reference for the slot; held, colliding under h, is forgotten.
func (t *msgShard) put(h uint64, m, held *msgEntry) {
	if len(t.cur.msgs)+t.cur.npend >= shardGenSize {
		t.rotate() // held goes with the old generation
	} else if held != nil {
		t.unref(held)
	}
	t.cur.msgs[h] = m
	m.refs++
}

// rotate drops the old generation and starts a new current one.
func (t *msgShard) rotate() {
	for _, m := range t.old.msgs {
		t.unref(m)
	}
	for _, l := range t.old.pend {
		for _, m := range l {
			m.pending = false
			t.unref(m)
		}
	}
	clear(t.old.msgs)
	clear(t.old.pend)
	t.old.npend = 0
	t.old, t.cur = t.cur, t.old
	t.gen++
}

// genOf returns the generation numbered n, or nil if it is gone.
func (t *msgShard) genOf(n uint64) *msgGen {
	switch n {
	case t.gen:
		return &t.cur
	case t.gen - 1:
		return &t.old
	}
	return nil
}

// addPending registers m as waiting to be joined under fp; beyond pendMax
// the oldest is no longer joinable.
func (t *msgShard) addPending(m *msgEntry, fp []byte, fh uint64, front int) {
	m.fp = append(m.fp[:0], fp...)
	m.fpHash, m.pendFront, m.pendGen, m.pending = fh, front, t.gen, true
	m.refs++
	g := &t.cur
	g.npend++
	n := 0
	var oldest *msgEntry
	for _, e := range g.pend[fh] {
		if bytes.Equal(e.fp, fp) {
			if oldest == nil {
				oldest = e
			}
			n++
		}
	}
	g.pend[fh] = append(g.pend[fh], m)
	if n+1 > pendMax {
		t.unlinkPending(oldest)
	}
}

// unlinkPending removes m from its pending list.
func (t *msgShard) unlinkPending(m *msgEntry) {
	if !m.pending {
		return
	}
	if g := t.genOf(m.pendGen); g != nil {
		l := g.pend[m.fpHash]
		i := slices.Index(l, m)
		if l = slices.Delete(l, i, i+1); len(l) > 0 {
			g.pend[m.fpHash] = l
		} else {
			delete(g.pend, m.fpHash)
		}
		g.npend--
	}
	m.pending = false
	t.unref(m)
}

// takePending removes and returns the oldest message of fp registered by
// front, or nil; the caller takes over the list's reference.
func (t *msgShard) takePending(fp []byte, fh uint64, front int) *msgEntry {
	for _, g := range [2]*msgGen{&t.old, &t.cur} {
		for _, m := range g.pend[fh] {
			if m.pendFront == front && bytes.Equal(m.fp, fp) {
				m.refs++ // kept across the unlink
				t.unlinkPending(m)
				m.refs--
				return m
			}
		}
	}
	return nil
}

// end gives back the entry of one request (from get): a refused message
// is no longer joinable, and done (END-OF-MESSAGE) forgets req's view.
func (t *msgShard) end(m *msgEntry, req *Request, refused, done bool) {
	front := frontIndex(req.Stage)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setOpen(m, !refused && !done)
	if refused {
		t.unlinkPending(m)
	}
	if done {
		id, h := m.id[front], m.hash[front]
		for _, g := range [2]*msgGen{&t.cur, &t.old} {
			if o, ok := g.msgs[h]; ok && bytes.Equal(o.id[front], id) {
				delete(g.msgs, h)
				t.unref(o)
				break
			}
		}
	}
	t.unref(m)
}

// setOpen records whether m is in flight, under the shard's mutex.
func (t *msgShard) setOpen(m *msgEntry, open bool) {
	if m.open == open {
		return
	}
	m.open = open
	if open {
		t.nOpen.Add(1)
	} else {
		t.nOpen.Add(-1)
	}
}
