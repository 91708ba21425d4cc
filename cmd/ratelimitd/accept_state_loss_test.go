package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
)

// runRatelimitd runs the real ratelimitd command (this test binary
// re-executed, see TestMain) with args to its end, and returns its output
// and exit code.
func runRatelimitd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS="+strings.Join(args, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), 0
}

// damageOffender flips one bit in the middle of the stored record that
// holds key's rate state (its snapshot value, else the journal record
// naming it), in place: the record keeps its length and key, and fails
// its checksum.
func damageOffender(t *testing.T, path, key string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		flip := func(b *bolt.Bucket, k []byte) error {
			v := bytes.Clone(b.Get(k))
			v[len(v)/2] ^= 0x08
			return b.Put(bytes.Clone(k), v)
		}
		if j := tx.Bucket([]byte("ratejournal")); j != nil {
			c := j.Cursor()
			for k, v := c.Last(); k != nil; k, v = c.Prev() {
				if bytes.Contains(v, []byte(key)) {
					return flip(j, k)
				}
			}
		}
		if b := tx.Bucket([]byte("ratestate")).Bucket([]byte("hourly")); b != nil && b.Get([]byte(key)) != nil {
			return flip(b, []byte(key))
		}
		return fmt.Errorf("no record of %s", key)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestServeAcceptStateLoss runs the real command on a state file whose
// record of an offender fails its checksum: serve refuses, naming the
// file, the records, the keys and both ways out; state check exits 1
// reporting records, bytes and keys; serve --accept-state-loss starts,
// logs one ERROR with the count, and ratelimitd_state_keys_lost_total
// and status show it; the next plain serve starts (the records were set
// aside).
func TestServeAcceptStateLoss(t *testing.T) {
	mport := freePort(t)
	td, addr, cfg := startRefusing(t, "")
	for i := range 50 {
		policyQuery(t, addr, fmt.Sprintf("user%03d", i), "END-OF-MESSAGE")
	}
	td.stop()
	text, _ := os.ReadFile(cfg)
	text = bytes.Replace(text, []byte(`metrics_listen = ""`), fmt.Appendf(nil, `metrics_listen = "127.0.0.1:%d"`, mport), 1)
	if err := os.WriteFile(cfg, text, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := f.Server.DBPath()
	damageOffender(t, path, "mallory")

	out, code := runRatelimitd(t, "serve", "--config", cfg)
	if code == 0 {
		t.Fatalf("serve started on a damaged record:\n%s", out)
	}
	for _, want := range []string{path, "1 records cannot be read", "keys", "ratelimitd state check --config CONFIG --salvage NEW.db",
		"ratelimitd serve --config CONFIG --accept-state-loss"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}

	out, code = runRatelimitd(t, "state", "check", "--config", cfg)
	if code != 1 {
		t.Errorf("state check exit %d, want 1:\n%s", code, out)
	}
	if !regexp.MustCompile(`records ratestate: \d+ records, \d+ bytes, \d+ keys, 1 UNREADABLE`).MatchString(out) &&
		!regexp.MustCompile(`records ratejournal: \d+ records, \d+ bytes, \d+ keys, 1 UNREADABLE`).MatchString(out) {
		t.Errorf("state check does not report records, bytes, keys and the unreadable one:\n%s", out)
	}
	if !strings.Contains(out, "UNREADABLE record") || !strings.Contains(out, "DAMAGED") {
		t.Errorf("state check does not name the record:\n%s", out)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfg+" --accept-state-loss")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), "ratelimitd started"); {
		if time.Now().After(deadline) {
			t.Fatalf("serve --accept-state-loss did not start:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	errs := regexp.MustCompile(`(?m)^.*level=ERROR.*--accept-state-loss.*$`).FindAllString(log.String(), -1)
	if len(errs) != 1 || !strings.Contains(errs[0], "records=1") || !strings.Contains(errs[0], "keys=") {
		t.Errorf("want one ERROR with the count, got %q:\n%s", errs, log.String())
	}
	keys := regexp.MustCompile(`keys=(\d+)`).FindStringSubmatch(errs[0])
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if keys == nil || !strings.Contains(string(body), "ratelimitd_state_keys_lost_total "+keys[1]+"\n") {
		t.Errorf("metrics lack ratelimitd_state_keys_lost_total %v:\n%s", keys, grepLines(string(body), "lost"))
	}
	out, code = runRatelimitd(t, "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "STATE LOST at start: 1 unreadable records set aside (--accept-state-loss), up to "+keys[1]+" keys") {
		t.Errorf("status (exit %d) does not show the loss:\n%s", code, out)
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()

	out, code = runRatelimitd(t, "state", "check", "--config", cfg)
	if code != 0 {
		t.Errorf("state check after the loss was accepted: exit %d:\n%s", code, out)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
