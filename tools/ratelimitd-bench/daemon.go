package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/configs"
)

// buildDaemon builds ratelimitd into dir and returns the binary's path.
// It must run inside the tools module, whose go.mod points
// github.com/ratelimitd/ratelimitd at the product's directory: the daemon
// is built there, with the product's own go.mod.
func buildDaemon(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "ratelimitd")
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	root, err := exec.CommandContext(ctx, goCmd, "list", "-m", "-f", "{{.Dir}}", "github.com/ratelimitd/ratelimitd").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/ratelimitd/ratelimitd: %w", err)
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/ratelimitd")
	cmd.Dir = strings.TrimSpace(string(root))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ratelimitd in %s: %w\n%s", cmd.Dir, err, out.Bytes())
	}
	return bin, nil
}

// daemonConfig is the configuration the program gives the daemon: the
// embedded default's [policy] table and [[limit]] stack (200/1h leaky
// defer + 1000/24h strict defer per sasl_username) behind a [server] table
// of its own: a loopback port and, if unixPath is not "", a unix socket,
// a temporary state directory, no metrics listener, the given
// flush_interval (1 s in make bench) and the [store] table store (""
// for the local backend); events = false turns the event log off ([events]
// enabled = false).
func daemonConfig(addr, unixPath, stateDir, logLevel string, flush time.Duration, store string, events bool) ([]byte, *config.File, error) {
	def := configs.Default
	i := bytes.Index(def, []byte("\n[policy]"))
	if i < 0 {
		return nil, nil, errors.New("embedded default configuration has no [policy] table")
	}
	listen := strconv.Quote(addr)
	if unixPath != "" {
		listen += ", " + strconv.Quote("unix:"+unixPath)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Written by ratelimitd-bench.
[server]
policy_listen = [%s]
state_dir = %s
metrics_listen = ""
flush_interval = %s
log_level = %s
`, listen, strconv.Quote(stateDir), strconv.Quote(flush.String()), strconv.Quote(logLevel))
	rest := def[i:]
	if !events {
		rest = bytes.Replace(rest, []byte("\n[events]\n"), []byte("\n[events]\nenabled = false\n"), 1)
	}
	b.Write(rest)
	b.WriteString(store)
	f, err := config.Parse(b.Bytes(), "ratelimitd-bench config")
	if err != nil {
		return nil, nil, err
	}
	return b.Bytes(), f, nil
}

// describeLimits is the limit stack of f, one line.
func describeLimits(f *config.File) string {
	var parts []string
	for _, l := range f.Limits {
		per, mode, action := l.Per, l.Mode, l.Action
		if per == "" {
			per = "mail"
		}
		if mode == "" {
			mode = "leaky"
		}
		if action == "" {
			action = "defer"
		}
		parts = append(parts, fmt.Sprintf("%s %g/%s per %s by %s (%s, %s)", l.Name, l.Limit,
			human.Duration(time.Duration(l.Period)), per, strings.Join(l.Key, "+"), mode, action))
	}
	return strings.Join(parts, " + ")
}

// daemon is the ratelimitd this program runs.
type daemon struct {
	bin, cfgPath, addr, logPath string
	unixAddr                    string // "unix:PATH"
	f                           *config.File
	env                         []string // added to the environment
	cpus                        []int    // the CPUs it runs on (--pin), nil: any
	*child
}

// newDaemon writes the configuration into dir for a daemon listening on a
// free loopback port and on the unix socket dir/policy.sock.
func newDaemon(bin, dir, logLevel string, flush time.Duration, store string, events bool) (*daemon, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	unixPath := filepath.Join(dir, "policy.sock")
	cfg, f, err := daemonConfig(addr, unixPath, filepath.Join(dir, "state"), logLevel, flush, store, events)
	if err != nil {
		return nil, err
	}
	d := &daemon{bin: bin, cfgPath: filepath.Join(dir, "ratelimitd.toml"), addr: addr, unixAddr: "unix:" + unixPath,
		logPath: filepath.Join(dir, "daemon.log"), f: f}
	if err := os.WriteFile(d.cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	return d, nil
}

// start runs `ratelimitd serve --config FILE` and returns once it answers
// on its policy port, reporting how long that took (restoring the rate
// state comes first).
func (d *daemon) start(ctx context.Context) (time.Duration, error) {
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(d.bin, "serve", "--config", d.cfgPath)
	cmd.Dir = filepath.Dir(d.cfgPath)
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	c, err := startChild("ratelimitd", cmd, d.logPath, d.cpus)
	logf.Close()
	if err != nil {
		return 0, err
	}
	c.addr, c.unixAddr = d.addr, d.unixAddr
	d.child = c
	if err := waitListening(ctx, c, d.addr, 2*time.Minute); err != nil {
		c.stop(15 * time.Second)
		return 0, err
	}
	return time.Since(start), nil
}

// dbPath is the daemon's BoltDB file.
func (d *daemon) dbPath() string { return d.f.Server.DBPath() }

// adminSocket is the daemon's admin socket.
func (d *daemon) adminSocket() string { return d.f.Server.AdminSocket }
