//go:build integration

package daemon

import (
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// timeReply is a TIME answer (RESP2 or RESP3): an array of the seconds
// and the microseconds as bulk strings.
var timeReply = regexp.MustCompile(`\*2\r\n\$10\r\n(\d{10})\r\n\$\d\r\n\d+\r\n`)

// skewedRedis starts a TCP proxy to the Redis server at addr that adds
// skew (whole seconds) to the seconds of every TIME answer: a Redis
// whose clock is off this host's. It returns the proxy's address.
func skewedRedis(t *testing.T, addr string, skew time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, r)
			mu.Unlock()
			go func() { io.Copy(r, c); r.Close() }()
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := r.Read(buf)
					if n > 0 {
						out := timeReply.ReplaceAllFunc(buf[:n], func(m []byte) []byte {
							sub := timeReply.FindSubmatch(m)
							sec, _ := strconv.ParseInt(string(sub[1]), 10, 64)
							return []byte(strings.Replace(string(m), string(sub[1]), strconv.FormatInt(sec+int64(skew/time.Second), 10), 1))
						})
						if _, err := c.Write(out); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestStatusShowsRedisClock: with the Redis backend, `ratelimitd status`
// shows Redis's clock (TIME), the one decisions and `rate show` use, not
// this host's: behind a Redis whose clock is 2 hours ahead it says so
// (redis_time 2h ahead, "2h0m0s behind redis"); while Redis does not
// answer it says the clock was not read.
func TestStatusShowsRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	proxy := skewedRedis(t, srv.Addr, 2*time.Hour)
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), redisConfig(proxy, "local")))
	if got := td.message("tina", "RCPT"); got != "action=DUNNO" {
		t.Fatalf("first request: %s", got)
	}
	st := td.adminStatus()
	if st.Store == nil || st.Store.Degraded {
		t.Fatalf("store status: %+v", st.Store)
	}
	if ahead := time.Until(st.RedisTime); ahead < 2*time.Hour-time.Minute || ahead > 2*time.Hour+time.Minute {
		t.Errorf("status redis_time %v is %v ahead of this host, want Redis's TIME (2h ahead)", st.RedisTime, ahead)
	}
	if off := st.Store.ClockOffset; off < 2*time.Hour-time.Second || off > 2*time.Hour+time.Second {
		t.Errorf("status clock offset %v, want 2h", off)
	}
	if out := td.statusText(); !strings.Contains(out, "store: redis clock "+st.RedisTime.UTC().Format("2006-01-02T15")) ||
		!strings.Contains(out, "this host's clock 2h0m0") || !strings.Contains(out, "behind redis") {
		t.Errorf("status with a Redis 2h ahead:\n%s", out)
	}

	srv.Stop()
	defer srv.Resume()
	td.message("tina", "RCPT") // decided locally after redis_timeout
	if s := td.Status().Store; s == nil || !s.Degraded {
		t.Fatalf("store not degraded with Redis paused: %+v", s)
	}
	if st := td.adminStatus(); !st.RedisTime.IsZero() {
		t.Errorf("status redis_time %v while Redis does not answer, want none", st.RedisTime)
	}
	if out := td.statusText(); !strings.Contains(out, "store: redis clock not read (redis not answering)") || !strings.Contains(out, "2h0m0") {
		t.Errorf("status with Redis paused:\n%s", out)
	}
}
