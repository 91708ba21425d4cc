// Command redis-replay measures what Redis itself spends per decided
// message on the store's fast path, without the daemon or a load
// generator competing for the CPUs: it sends the decision script
// (ratestore/redisstore/stack.lua) the calls the daemon sends for
// messages whose records it knows (each record stored with one
// SET ... KEEPTTL GET and confirmed), -batch messages of random users
// per call, one call at a time, taking turns among the servers, and
// prints the servers' CPU time (INFO cpu, summed) per message.
//
// With several -addrs and -cluster=false they are independent standalone
// servers, each holding its share of the users; with -cluster they are
// the masters of one Redis Cluster (each call's users are of one slot,
// as the daemon's calls are, and it goes to that slot's master). Comparing one server,
// three standalone servers and a 3-master Cluster at the same batch size
// separates what Redis Cluster costs from what several processes taking
// turns on the same CPUs cost (docs/performance.md). Usage (in tools/):
//
//	go run ./redis-replay -addrs 127.0.0.1:6379 -batch 12
//	go run ./redis-replay -cluster -addrs A,B,C -batch 6
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

func main() {
	addrs := flag.String("addrs", "127.0.0.1:6379", "comma-separated redis-server addresses")
	cluster := flag.Bool("cluster", false, "the addresses are the masters of one Redis Cluster")
	batch := flag.Int("batch", 12, "messages (requests of the default two-limit stack) per script call")
	users := flag.Int("keys", 100000, "distinct users (rate keys)")
	calls := flag.Int("calls", 4000, "script calls to send")
	script := flag.String("script", "ratestore/redisstore/stack.lua", "the decision script")
	flag.Parse()
	if err := run(strings.Split(*addrs, ","), *cluster, *batch, *users, *calls, *script); err != nil {
		fmt.Fprintln(os.Stderr, "redis-replay:", err)
		os.Exit(1)
	}
}

// server is one redis-server and the users whose records it holds.
type server struct {
	addr  string
	c     rueidis.Client
	sha   string
	keys  []string
	slots [][2]int64 // with -cluster: the slot ranges it serves
	// bySlot holds the users of each slot (with -cluster).
	bySlot map[uint16][]string
}

func run(addrs []string, cluster bool, batch, users, calls int, scriptPath string) error {
	src, err := os.ReadFile(scriptPath)
	if err != nil {
		return err
	}
	ctx := context.Background()
	srvs := make([]*server, len(addrs))
	for i, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			return err
		}
		defer c.Close()
		sha, err := c.Do(ctx, c.B().ScriptLoad().Script(string(src)).Build()).ToString()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		srvs[i] = &server{addr: a, c: c, sha: sha}
		if cluster {
			if srvs[i].slots, err = ownSlots(ctx, c, a); err != nil {
				return fmt.Errorf("%s: %w", a, err)
			}
		}
	}
	// The store names the records (Key; Open does not connect).
	names, err := redisstore.Open(redisstore.Options{Addrs: addrs})
	if err != nil {
		return err
	}
	// Every user's record, as the daemon stores it: the key's expiry,
	// then per limit its name and 20-byte state.
	version := make(map[string]int, users)
	for u := range users {
		k := names.Key(fmt.Sprintf("user%07d@example.org", u))
		s := srvs[u%len(srvs)]
		if cluster {
			s = owner(srvs, int64(redisstore.Slot(k)))
			if s == nil {
				return fmt.Errorf("no master serves the slot of %s", k)
			}
		}
		s.keys = append(s.keys, k)
		if cluster {
			if s.bySlot == nil {
				s.bySlot = map[uint16][]string{}
			}
			s.bySlot[redisstore.Slot(k)] = append(s.bySlot[redisstore.Slot(k)], k)
		}
		version[k] = 0
	}
	for _, s := range srvs {
		if cluster && !slices.ContainsFunc(slices.Collect(maps.Values(s.bySlot)), func(us []string) bool { return len(us) >= batch }) {
			return fmt.Errorf("no slot of %s holds -batch users", s.addr)
		}
	}
	for _, s := range srvs {
		cmds := make(rueidis.Commands, 0, len(s.keys))
		for _, k := range s.keys {
			cmds = append(cmds, s.c.B().Set().Key(k).Value(record(0)).PxMilliseconds(int64(time.Hour/time.Millisecond)).Build())
		}
		for _, r := range s.c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		if err := s.c.Do(ctx, s.c.B().ConfigResetstat().Build()).Error(); err != nil {
			return err
		}
	}
	cpu0, err := cpuSeconds(ctx, srvs)
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range calls {
		s := srvs[i%len(srvs)]
		if len(s.keys) < batch {
			return fmt.Errorf("%s holds %d users, fewer than -batch", s.addr, len(s.keys))
		}
		if err := call(ctx, s, cluster, batch, version); err != nil {
			return err
		}
	}
	took := time.Since(start)
	cpu1, err := cpuSeconds(ctx, srvs)
	if err != nil {
		return err
	}
	msgs := calls * batch
	kind := "standalone"
	if cluster {
		kind = "cluster"
	}
	fmt.Printf("%s, %d server(s), %d messages per call, %d users: %d messages, Redis CPU %.2f µs per message (%.0f messages/s)\n",
		kind, len(srvs), batch, users, msgs, (cpu1-cpu0)*1e6/float64(msgs), float64(msgs)/took.Seconds())
	return nil
}

// call sends one script call deciding batch messages of random users of
// s by the fast path, and checks that every one was confirmed.
func call(ctx context.Context, s *server, cluster bool, batch int, version map[string]int) error {
	keys := make([]string, 0, batch)
	seen := map[string]bool{}
	from := s.keys
	if cluster {
		// A random slot with at least batch users: a call's keys are of
		// one slot.
		for from = nil; len(from) < batch; {
			from = s.bySlot[redisstore.Slot(s.keys[rand.IntN(len(s.keys))])]
		}
	}
	for len(keys) < batch {
		k := from[rand.IntN(len(from))]
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	// ARGV: phase, time ("?": TIME only if the script decides), the two
	// limit specifications, the packed requests, then per key the record
	// expected and the one to store.
	args := []string{"d", "?", "", "2",
		"hourly", "200", strconv.FormatInt(int64(time.Hour), 10), "0", "0", "0",
		"daily", "1000", strconv.FormatInt(int64(24*time.Hour), 10), "1", "0", "0"}
	base := len(args) + 1                              // ARGV index of the packed requests (from 1)
	packed := binary.LittleEndian.AppendUint32(nil, 0) // records to MGET
	packed = append(packed, 1)                         // the caller wants records back
	var recs []string
	for j, k := range keys {
		packed = binary.LittleEndian.AppendUint32(packed, 2) // items
		packed = append(packed, 0)                           // not refused before
		packed = binary.LittleEndian.AppendUint16(packed, 1) // keys decided by the caller
		packed = binary.LittleEndian.AppendUint32(packed, uint32(j+1))
		packed = binary.LittleEndian.AppendUint32(packed, uint32(base+1+2*j))
		packed = append(packed, 0) // keep the key's expiry
		packed = binary.LittleEndian.AppendUint64(packed, 0)
		for spec := range 2 {
			packed = binary.LittleEndian.AppendUint32(packed, uint32(spec*4+1))
			packed = binary.LittleEndian.AppendUint32(packed, uint32(j+1))
			packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(1))
		}
		v := version[k]
		recs = append(recs, record(v), record(v+1))
		version[k] = v + 1
	}
	args = append(args, string(packed))
	args = append(args, recs...)
	cmd := s.c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys)))
	v, err := s.c.Do(ctx, cmd.Key(keys...).Arg(args...).Build()).ToArray()
	if err != nil {
		return fmt.Errorf("%s: %w", s.addr, err)
	}
	items, err := v[2].ToString()
	if err != nil {
		return err
	}
	for i := 0; i+21 <= len(items); i += 21 {
		if items[i] != 32 {
			return fmt.Errorf("%s: a message was not confirmed by the fast path (flag %d)", s.addr, items[i])
		}
	}
	return nil
}

// record is a record of the default stack's two limits whose states
// depend on v.
func record(v int) string {
	b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(1.9e12))
	for i, name := range []string{"hourly", "daily"} {
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(1700000000+v))
		b = binary.LittleEndian.AppendUint32(b, 5)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(i+1+v)))
	}
	return string(b)
}

// ownSlots returns the slot ranges the Cluster master at addr serves
// (CLUSTER SLOTS).
func ownSlots(ctx context.Context, c rueidis.Client, addr string) ([][2]int64, error) {
	v, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var out [][2]int64
	for _, r := range v {
		e, err := r.ToArray()
		if err != nil || len(e) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: unexpected entry")
		}
		lo, _ := e[0].AsInt64()
		hi, _ := e[1].AsInt64()
		node, _ := e[2].ToArray()
		if len(node) < 2 {
			continue
		}
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		if host+":"+strconv.FormatInt(port, 10) == addr {
			out = append(out, [2]int64{lo, hi})
		}
	}
	return out, nil
}

// owner returns the server whose slot ranges hold slot.
func owner(srvs []*server, slot int64) *server {
	for _, s := range srvs {
		for _, r := range s.slots {
			if slot >= r[0] && slot <= r[1] {
				return s
			}
		}
	}
	return nil
}

// cpuSeconds sums the servers' used_cpu_user and used_cpu_sys (INFO cpu).
func cpuSeconds(ctx context.Context, srvs []*server) (float64, error) {
	var t float64
	for _, s := range srvs {
		info, err := s.c.Do(ctx, s.c.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			return 0, err
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, err
				}
				t += f
			}
		}
	}
	return t, nil
}
