package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/boltcorrupt"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// Tests of `state check` (and --salvage) and of the daemon's refusal to
// start on a damaged state file: stored rate state is never forgiven
// silently.

// startRefusing starts a daemon on a new configuration (writeConfig with
// extra, in a temporary directory) and has it refuse mallory (refuse, 200
// messages); it returns the daemon, its policy address and the
// configuration's path.
func startRefusing(t *testing.T, extra string) (td *testDaemon, addr, cfg string) {
	t.Helper()
	addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg = writeConfig(t, t.TempDir(), addr, extra)
	td = startTestDaemon(t, cfg)
	refuse(t, addr, "mallory", 200)
	return td, addr, cfg
}

// refuse sends n messages of user that must pass, then one that must be
// deferred.
func refuse(t *testing.T, addr, user string, n int) {
	t.Helper()
	for i := range n {
		if got := policyQuery(t, addr, user, "END-OF-MESSAGE"); got != "action=DUNNO" {
			t.Fatalf("%s message %d: %s", user, i+1, got)
		}
	}
	mustDefer(t, addr, user)
}

func mustDefer(t *testing.T, addr, user string) {
	t.Helper()
	if got := policyQuery(t, addr, user, "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Fatalf("%s is let through: %s", user, got)
	}
}

// addScratch adds to the BoltDB file at path a bucket "scratch" of 2,000
// keys ("scratchkey00000"...): large enough for branch pages, whatever the
// rate journal holds.
func addScratch(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("scratch"))
		for i := 0; err == nil && i < 2000; i++ {
			err = b.Put(fmt.Appendf(nil, "scratchkey%05d", i), []byte("value"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A damaged state file must not make the daemon or the offline CLI panic
// (exit 2), nor a 0-byte one start silently empty: each is refused with a
// message naming the file and the way out.
func TestDamagedStateFile(t *testing.T) {
	td, addr, cfg := startRefusing(t, "")
	for i := range 300 {
		policyQuery(t, addr, fmt.Sprintf("user%03d", i), "END-OF-MESSAGE")
	}
	td.stop()
	f, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := f.Server.DBPath()
	addScratch(t, path)
	image, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, "--config", cfg, "state", "check")
	if err != nil || !strings.Contains(out, "OK") || !strings.Contains(out, "limit hourly: 301 states (exponential 200 per 1h)") {
		t.Fatalf("state check of a sound file: %v\n%s", err, out)
	}
	ps := os.Getpagesize()
	rnd := rand.New(rand.NewPCG(1, 2))
	for name, damage := range map[string]func([]byte) []byte{
		"empty":     func([]byte) []byte { return nil },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"meta only": func(b []byte) []byte { return b[:2*ps] },
		"random": func(b []byte) []byte {
			for i := range b {
				b[i] = byte(rnd.Uint32())
			}
			return b
		},
		"zeroed pages": func(b []byte) []byte { clear(b[2*ps:]); return b },
		"cycle": func(b []byte) []byte {
			if !boltcorrupt.SelfReference(b) {
				t.Fatal("no branch page")
			}
			return b
		},
		"zeroed bucket pages": func(b []byte) []byte {
			boltcorrupt.ZeroBucketPages(b)
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, damage(bytes.Clone(image)), 0o600); err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ratestore.ErrDamaged) {
					t.Fatalf("%s: %v, want ErrDamaged", what, err)
				}
				for _, want := range []string{path, "ratelimitd state check", "mv " + path} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: the message lacks %q:\n%v", what, want, err)
					}
				}
			}
			_, err := daemon.Start(f, cfg, io.Discard, daemon.Options{})
			check("serve", err)
			_, err = daemon.OpenRates(f, false)
			check("rate list", err)
			out, err := cli(t, "--config", cfg, "rate", "list")
			if err == nil {
				t.Errorf("rate list on a damaged file: no error\n%s", out)
			}
			out, err = cli(t, "--config", cfg, "state", "check")
			if !errors.Is(err, ratestore.ErrDamaged) || !strings.Contains(out, "DAMAGED") {
				t.Errorf("state check: %v\n%s", err, out)
			}
		})
	}
}

// metricValue returns the value of the sample named name (with its
// labels) in a Prometheus text exposition, or -1.
func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// state check --salvage copies what is readable into a new state file:
// from a sound file everything, from a file with a damaged bucket every
// other bucket (the offender is still refused once it is moved into
// place), without panicking; a file with a cycle is refused.
func TestStateSalvage(t *testing.T) {
	td, addr, cfg := startRefusing(t, "")
	td.stop()
	dir := filepath.Dir(cfg)
	path := filepath.Join(dir, "state", "ratelimitd.db")
	addScratch(t, path) // pages of its own, to damage apart from the rate state
	image, _ := os.ReadFile(path)
	salvage := func(what string) (string, error) {
		t.Helper()
		salvaged := filepath.Join(dir, "salvaged.db")
		os.Remove(salvaged)
		out, err := cli(t, "--config", cfg, "state", "check", "--salvage", salvaged)
		if _, serr := os.Stat(salvaged); serr == nil {
			if err := os.Rename(salvaged, path); err != nil {
				t.Fatal(err)
			}
			td = startTestDaemon(t, cfg)
			mustDefer(t, addr, "mallory")
			td.stop()
		}
		return out, err
	}
	out, err := salvage("sound")
	if err != nil || !strings.Contains(out, "OK") || !strings.Contains(out, "salvaged ratestate: ") || !strings.Contains(out, "salvaged scratch: 2000 keys") {
		t.Fatalf("salvage of a sound file: %v\n%s", err, out)
	}

	// One leaf page of scratch zeroed: everything else is salvaged.
	b := bytes.Clone(image)
	ps := os.Getpagesize()
	for pg := len(b)/ps - 1; pg >= 2; pg-- {
		if p := b[pg*ps : (pg+1)*ps]; bytes.Contains(p, []byte("scratchkey01")) && p[8] == 0x02 { // a leaf
			clear(p)
			break
		}
	}
	os.WriteFile(path, b, 0o600)
	out, err = salvage("one bucket damaged")
	if !errors.Is(err, ratestore.ErrDamaged) || !strings.Contains(out, "salvaged ratestate: ") || !strings.Contains(out, "skipped scratch") {
		t.Errorf("salvage with scratch damaged: %v\n%s", err, out)
	}

	b = bytes.Clone(image)
	if !boltcorrupt.SelfReference(b) {
		t.Fatal("no branch page")
	}
	os.WriteFile(path, b, 0o600)
	out, err = salvage("cycle")
	if !errors.Is(err, ratestore.ErrDamaged) || !strings.Contains(err.Error(), "nothing copied") {
		t.Errorf("salvage of a file with a cycle: %v\n%s", err, out)
	}
}
