package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

func TestEmbeddedDefault(t *testing.T) {
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if f.Source != config.EmbeddedSource || len(f.Limits) != 2 || f.Limits[0].Limit != 200 || f.Limits[1].Limit != 1000 {
		t.Fatalf("default: %+v", f)
	}
	if f.Server.PolicyListen[0] != "127.0.0.1:10031" || f.Server.DBPath() != filepath.Join(config.DefaultStateDir(), "ratelimitd.db") {
		t.Fatalf("server defaults: %+v", f.Server)
	}
	if time.Duration(f.Server.FlushInterval) != time.Second || f.Quarantine.MaxSize != 2<<30 {
		t.Fatalf("defaults: flush %v max_size %d", f.Server.FlushInterval, f.Quarantine.MaxSize)
	}
}

// Every problem is reported, each with its key.
func TestEveryErrorWithItsKey(t *testing.T) {
	_, err := config.Parse([]byte(`
[server]
policy_listen = ["0.0.0.0:10031"]
socket_mode = "0666"
flush_interval = "2m"
colour = "blue"

[quarantine]
max_size = "lots"

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 200
period = "1h"
per = "envelope"
`), "test.toml")
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
	for _, want := range []string{
		"test.toml",
		`invalid size "lots"`,
		"test.toml:9:13:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A decoding error stops before validation; fix it and see the rest.
	_, err = config.Parse([]byte(`
[server]
policy_listen = ["0.0.0.0:10031"]
socket_mode = "0666"
flush_interval = "2m"
colour = "blue"

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 200
period = "1h"
per = "envelope"
`), "test.toml")
	for _, want := range []string{
		"unknown key server.colour",
		"server.policy_listen[0]",
		"server.socket_mode",
		"server.flush_interval",
		"limit[0] (hourly).per",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestSizesAndDurations(t *testing.T) {
	f, err := config.Parse([]byte(`
[quarantine]
max_size = "10M"
max_age = "7d"
[milter]
max_message_size = 1048576
[[limit]]
name = "bytes"
key = ["sender_domain", "client_subnet"]
limit = 52428800
period = "1d12h"
per = "byte"
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	if f.Quarantine.MaxSize != 10<<20 || time.Duration(*f.Quarantine.MaxAge) != 7*24*time.Hour || f.Milter.MaxMessageSize != 1<<20 {
		t.Fatalf("%+v %+v", f.Quarantine, f.Milter)
	}
	if time.Duration(f.Limits[0].Period) != 36*time.Hour {
		t.Fatalf("period %v", f.Limits[0].Period)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// The shipped example configurations are valid.
func TestShippedConfigs(t *testing.T) {
	for _, p := range []string{"../configs/ratelimitd.toml", "../testdata/traces/relay.toml"} {
		if _, err := config.Load(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// An empty or limit-less configuration would run the daemon with every
// sender unlimited: it is refused unless it says so with
// [policy] limits = "none".
func TestNoLimitsMustBeExplicit(t *testing.T) {
	for name, text := range map[string]string{
		"empty file":   "",
		"only comment": "# nothing here\n",
		"server only":  "[server]\nstate_dir = \"/tmp/x\"\n",
		"policy only":  "[policy]\non_full = \"defer\"\n",
	} {
		_, err := config.Parse([]byte(text), "empty.toml")
		if !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: want ErrInvalid, got %v", name, err)
			continue
		}
		for _, want := range []string{"empty.toml", "no [[limit]]", `limits = "none"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error lacks %q: %v", name, want, err)
			}
		}
	}
	f, err := config.Parse([]byte("[policy]\nlimits = \"none\"\n"), "none.toml")
	if err != nil {
		t.Fatalf("explicit limits = \"none\": %v", err)
	}
	if !f.NoLimits || len(f.Limits) != 0 {
		t.Fatalf("limits = none: NoLimits %v, %d limits", f.NoLimits, len(f.Limits))
	}
	for name, text := range map[string]string{
		"unknown value":     "[policy]\nlimits = \"all\"\n",
		"none with a limit": "[policy]\nlimits = \"none\"\n[[limit]]\nname = \"h\"\nkey = [\"sender\"]\nlimit = 5\nperiod = \"1h\"\n",
	} {
		if _, err := config.Parse([]byte(text), "t.toml"); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "policy.limits") {
			t.Errorf("%s: want an error naming policy.limits, got %v", name, err)
		}
	}
}

// TestRestartKeys: the settings a reload does not apply ([server],
// [quarantine], [milter], [notify], [store]) are listed, by table and field
// order.
func TestRestartKeys(t *testing.T) {
	base := "[[limit]]\nname = \"h\"\nkey = [\"sender\"]\nlimit = 5\nperiod = \"1h\"\n"
	a, err := config.Parse([]byte(base), "a")
	if err != nil {
		t.Fatal(err)
	}
	if k := config.RestartKeys(a, a); k != nil {
		t.Fatalf("same file: %v", k)
	}
	for _, tc := range []struct{ changed, want string }{
		{"[server]\nadmin_socket = \"/run/x.sock\"\nmetrics_listen = \"\"\n[quarantine]\nmax_age = \"1d\"\n[milter]\nlisten = \"unix:/run/m.sock\"\n",
			"server.admin_socket server.metrics_listen quarantine.max_age milter.listen"},
		{"[notify.webhook]\nurl = \"http://127.0.0.1:1/x\"\n", "notify.webhook"},
		{"[store]\nbackend = \"redis\"\nredis_timeout = \"1s\"\n", "store.backend store.redis_timeout"},
	} {
		b, err := config.Parse([]byte(base+tc.changed), "b")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(config.RestartKeys(a, b), " "); got != tc.want {
			t.Errorf("RestartKeys after\n%s= %q, want %q", tc.changed, got, tc.want)
		}
	}
}

func TestMaxConnections(t *testing.T) {
	base := "[[limit]]\nname = \"h\"\nkey = [\"sender\"]\nlimit = 5\nperiod = \"1h\"\n[server]\n"
	f, err := config.Parse([]byte(base+"max_connections = 500\n"), "t")
	if err != nil || f.Server.MaxConnections != 500 {
		t.Fatalf("max_connections = 500: %v %+v", err, f)
	}
	if _, err := config.Parse([]byte(base+"max_connections = -1\n"), "t"); err == nil || !strings.Contains(err.Error(), "server.max_connections") {
		t.Fatalf("negative max_connections: %v", err)
	}
}

// TestServerUser checks server.user and server.group: a group without a
// user and root as the user are refused, a user alone is accepted.
func TestServerUser(t *testing.T) {
	const limit = "\n[[limit]]\nname = \"h\"\nkey = [\"sasl_username\"]\nlimit = 200\nperiod = \"1h\"\n"
	f, err := config.Parse([]byte("[server]\nuser = \"ratelimitd\"\n"+limit), "t")
	if err != nil || f.Server.User != "ratelimitd" || f.Server.Group != "" {
		t.Fatalf("user alone: %v %+v", err, f)
	}
	for text, want := range map[string]string{
		"[server]\ngroup = \"postfix\"\n": "server.group",
		"[server]\nuser = \"root\"\n":     "server.user",
	} {
		if _, err := config.Parse([]byte(text+limit), "t"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", text, err, want)
		}
	}
}

// Several problems of one section are reported in the order of its keys,
// the same on every run (config check output must not shuffle).
func TestErrorsInKeyOrder(t *testing.T) {
	text := []byte(`
[quarantine]
max_size = -1
max_age = "-1h"
keep_thawed = "-1h"

[events]
max_age = "1s"
actions_max_age = "1s"
`)
	orders := [][]string{{"quarantine.max_size", "quarantine.max_age", "quarantine.keep_thawed"},
		{"events.max_age", "events.actions_max_age"}}
	for run := range 20 {
		_, err := config.Parse(text, "order.toml")
		if err == nil {
			t.Fatal("want errors")
		}
		msg := err.Error()
		for _, order := range orders {
			at := -1
			for _, key := range order {
				i := strings.Index(msg, key+":")
				if i < 0 {
					t.Fatalf("run %d: no %q in:\n%s", run, key, msg)
				}
				if i < at {
					t.Fatalf("run %d: %q out of key order in:\n%s", run, key, msg)
				}
				at = i
			}
		}
	}
}
