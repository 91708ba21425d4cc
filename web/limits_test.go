package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// Idle keep-alive connections at the listener's cap give way to a new
// one: a new request is served at once, not after the idle timeout.
func TestIdleKeepAlivesCannotBlockConsole(t *testing.T) {
	f := newFixture(t, false)
	f.srv.opts.Listen = "127.0.0.1:0"
	if err := f.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.srv.Shutdown(context.Background()) })
	addr := f.srv.Addr().String()
	for round := range 3 {
		for range srvconn.HTTPConns() {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /login HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("round %d: keep-alive request: %v", round, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		// Promptly: well inside the idle timeout the connections would
		// otherwise hold their places for.
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + addr + "/login")
		if err != nil {
			t.Fatalf("round %d: request with %d idle keep-alive connections open: %v", round, srvconn.HTTPConns(), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: status %d", round, resp.StatusCode)
		}
	}
}

// gatedEvents holds Query for the key "slow" until gate is closed.
type gatedEvents struct {
	admin.Events
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedEvents) Query(ctx context.Context, q events.Query) ([]events.Event, error) {
	if q.Key == "slow" {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.Events.Query(ctx, q)
}

// While one chart is drawn, charts asked for in parallel are answered 503
// with Retry-After at once; once it is done the next one is drawn.
func TestParallelChartsBeyondTheBoundGet503(t *testing.T) {
	f := newFixture(t, false)
	g := &gatedEvents{Events: f.srv.opts.Services.Events, entered: make(chan struct{}, 1)}
	f.srv.opts.Services.Events = g
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	for round := range 3 {
		gate := make(chan struct{})
		g.gate = gate
		release := sync.OnceFunc(func() { close(gate) })
		defer release() // a failure below must not leave the first render held
		first := make(chan int, 1)
		go func() {
			resp, err := c.Get(f.ts.URL + "/chart.png?key=slow")
			if err != nil {
				first <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		<-g.entered
		hc := *c
		hc.Timeout = 10 * time.Second // quickly: the first render is held until the end
		var wg sync.WaitGroup
		codes := make(chan string, 4)
		for range 4 {
			wg.Go(func() {
				resp, err := hc.Get(f.ts.URL + "/chart.png?key=alice")
				if err != nil {
					codes <- err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				codes <- fmt.Sprintf("%d retry=%s %.40q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			})
		}
		wg.Wait()
		close(codes)
		for got := range codes {
			if !strings.HasPrefix(got, `503 retry=2 "chart:`) {
				t.Fatalf("round %d: a chart beyond the bound: %q, want 503 with Retry-After", round, got)
			}
		}
		release()
		if code := <-first; code != http.StatusOK {
			t.Fatalf("round %d: the chart being drawn: status %d", round, code)
		}
	}
	resp, err := c.Get(f.ts.URL + "/chart.png?key=alice")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("a chart after the others: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
