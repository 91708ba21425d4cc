package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// runAs is the user and group a daemon started as root drops to, as
// Postfix's daemons drop to mail_owner.
type runAs struct {
	user, group string
	uid, gid    int
	groups      []int // supplementary: the user's groups and gid (initgroups(3))
}

// lookupRunAs resolves server.user and server.group; nil (no drop) unless
// the user is set and this process is root.
func lookupRunAs(s config.Server) (*runAs, error) {
	if s.User == "" || os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(s.User)
	if err != nil {
		return nil, fmt.Errorf("server.user: %w (create it, e.g. adduser --system --group %s)", err, s.User)
	}
	r := &runAs{user: u.Username}
	r.uid, _ = strconv.Atoi(u.Uid)
	r.gid, _ = strconv.Atoi(u.Gid)
	if r.uid == 0 {
		return nil, fmt.Errorf("server.user: %s has uid 0; name an unprivileged user", s.User)
	}
	g, err := user.LookupGroupId(u.Gid)
	if s.Group != "" {
		g, err = user.LookupGroup(s.Group)
	}
	if err != nil {
		return nil, fmt.Errorf("server.group: %w", err)
	}
	r.group = g.Name
	r.gid, _ = strconv.Atoi(g.Gid)
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("server.user: the groups of %s: %w", s.User, err)
	}
	r.groups = []int{r.gid}
	for _, id := range ids {
		if n, err := strconv.Atoi(id); err == nil && !slices.Contains(r.groups, n) {
			r.groups = append(r.groups, n)
		}
	}
	return r, nil
}

// ownerHint is the error for path in the state directory dir that the
// daemon's user cannot use: the owner, and the chown that fixes it.
func ownerHint(path, dir, user, group string) error {
	return fmt.Errorf("%w: %s is %s, the daemon runs as %s: chown -R %s:%s %s", statedb.ErrPermission,
		path, statedb.Owner(path), user, user, group, dir)
}

// checkStateDir makes sure r may write the state directory (made for it
// when missing) and the state file, before the daemon opens them as root;
// whether the state file exists.
func (r *runAs) checkStateDir(dir, dbPath string) (dbExists bool, err error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
		if err := os.Chown(dir, r.uid, r.gid); err != nil {
			return false, fmt.Errorf("state_dir: %w", err)
		}
	}
	if !r.mayWrite(dir, true) {
		return false, ownerHint(dir, dir, r.user, r.group)
	}
	if _, err := os.Stat(dbPath); err != nil {
		return false, nil
	}
	if !r.mayWrite(dbPath, false) {
		return false, ownerHint(dbPath, dir, r.user, r.group)
	}
	return true, nil
}

// mayWrite reports whether r may read and write (a directory: write and
// enter) path by its permission bits.
func (r *runAs) mayWrite(path string, dir bool) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	want := fs.FileMode(0o6)
	if dir {
		want = 0o3
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == r.uid:
		return perm>>6&want == want
	case slices.Contains(r.groups, int(st.Gid)):
		return perm>>3&want == want
	}
	return perm&want == want
}

// drop changes this process's groups, group and user to r's for good
// (real, effective and saved IDs, every thread); any failure is an error.
func (r *runAs) drop() error {
	if err := syscall.Setgroups(r.groups); err != nil {
		return fmt.Errorf("server.group: setgroups: %w", err)
	}
	if err := syscall.Setgid(r.gid); err != nil {
		return fmt.Errorf("server.group: setgid %d: %w", r.gid, err)
	}
	if err := syscall.Setuid(r.uid); err != nil {
		return fmt.Errorf("server.user: setuid %d: %w", r.uid, err)
	}
	if syscall.Setuid(0) == nil || os.Geteuid() != r.uid || os.Getegid() != r.gid {
		return fmt.Errorf("server.user: still privileged after dropping to %s:%s", r.user, r.group)
	}
	return nil
}

// notMine is the error for a state file (in dir) this process may not
// open: who owns it and the chown that gives it to this process.
func notMine(dir, dbPath string) error {
	path := dbPath
	if _, err := os.Lstat(dbPath); errors.Is(err, fs.ErrPermission) {
		path = dir
	}
	u, g := strconv.Itoa(os.Geteuid()), strconv.Itoa(os.Getegid())
	if cu, err := user.LookupId(u); err == nil {
		u = cu.Username
	}
	if cg, err := user.LookupGroupId(g); err == nil {
		g = cg.Name
	}
	return ownerHint(path, dir, u, g)
}
