package web

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/alexedwards/argon2id"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Role is what a console user may do.
type Role string

// A Viewer reads every page; an Operator also acts.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
)

// ParseRole accepts "viewer" and "operator".
func ParseRole(s string) (Role, error) {
	switch r := Role(strings.ToLower(s)); r {
	case Viewer, Operator:
		return r, nil
	}
	return "", fmt.Errorf("web: role %q: want viewer or operator", s)
}

// argon2id parameters of new hashes (RFC 9106 section 4, second option)
// and the bounds of a stored hash's.
const (
	argonTime      = 3
	argonMemory    = 64 * 1024 // KiB
	argonThreads   = 2
	argonKeyLen    = 32
	argonSaltLen   = 16
	maxArgonMemory = 1024 * 1024
	maxArgonTime   = 16
)

// hashCost is the cost of new hashes; tests lower it.
var hashCost = struct{ time, memory uint32 }{argonTime, argonMemory}

var validName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// User is one line of the users file; Domains (canonical, sorted), if
// any, are the sender domains whose mail alone the user sees.
type User struct {
	Name    string
	Role    Role
	Domains []string
	hash    string // PHC string, never printed, logged or rendered
}

// entryID changes with the user's password, role and domains.
func (u User) entryID() string {
	h := sha256.Sum256([]byte(string(u.Role) + " " + u.hash + " " + strings.Join(u.Domains, ",")))
	return string(h[:])
}

// String shows the name, role and domains, never the hash.
func (u User) String() string {
	if len(u.Domains) > 0 {
		return u.Name + " (" + string(u.Role) + " of " + strings.Join(u.Domains, ", ") + ")"
	}
	return u.Name + " (" + string(u.Role) + ")"
}

// GoString is String for %#v.
func (u User) GoString() string { return "web.User{" + u.String() + "}" }

// LogValue is String for slog.
func (u User) LogValue() slog.Value { return slog.StringValue(u.String()) }

// Users is the users file (mode 0600): "NAME ROLE ARGON2ID-PHC
// [DOMAIN,...]" a line, '#' comments. Not safe for concurrent modification.
type Users struct {
	byName map[string]User
}

// LoadUsers reads the users file at path; a missing file has no users.
func LoadUsers(path string) (*Users, error) {
	u := &Users{byName: map[string]User{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return u, nil
	}
	if err != nil {
		return nil, fmt.Errorf("web: users file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(why string) error { return fmt.Errorf("web: users file %s:%d: %s", path, n, why) }
		f := strings.Fields(line)
		if len(f) != 3 && len(f) != 4 {
			return nil, bad("want NAME ROLE HASH [DOMAIN,...]")
		}
		// An unparsable field may be a hash: it is never echoed.
		if !validName.MatchString(f[0]) {
			return nil, bad("invalid user name")
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, bad("user " + f[0] + ": invalid role")
		}
		if err := checkHash(f[2]); err != nil {
			return nil, bad("user " + f[0] + ": " + err.Error())
		}
		x := User{Name: f[0], Role: role, hash: f[2]}
		if len(f) == 4 {
			if x.Domains, err = ParseDomains(strings.Split(f[3], ",")); err != nil {
				return nil, bad("user " + f[0] + ": " + err.Error())
			}
		}
		u.byName[f[0]] = x
	}
	return u, sc.Err()
}

// Len is the number of users.
func (u *Users) Len() int { return len(u.byName) }

// Lookup returns the user called name.
func (u *Users) Lookup(name string) (User, bool) {
	x, ok := u.byName[name]
	return x, ok
}

// Names lists the users, sorted.
func (u *Users) Names() []string {
	return slices.Sorted(maps.Keys(u.byName))
}

// Set adds or replaces a user; no domains: site-wide.
func (u *Users) Set(name string, role Role, password []byte, domains ...string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("web: user name %q: use 1 to 64 letters, digits and . _ @ -", name)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	ds, err := ParseDomains(domains)
	if err != nil {
		return err
	}
	if len(password) < 8 {
		return errors.New("web: the password must have at least 8 characters")
	}
	h, err := hashPassword(password)
	if err != nil {
		return err
	}
	u.byName[name] = User{Name: name, Role: role, Domains: ds, hash: h}
	return nil
}

// validDomain is a canonical domain: LDH labels (RFC 1035 2.3.1).
var validDomain = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ParseDomains returns the domains' canonical forms (policy.Domain),
// sorted and without repeats; an error names one that is not a domain.
func ParseDomains(ds []string) ([]string, error) {
	var out []string
	for _, d := range ds {
		c := policy.Domain(d)
		if strings.HasPrefix(d, "@") || len(c) > 253 || !validDomain.MatchString(c) {
			return nil, fmt.Errorf("web: domain %q: want a domain name such as example.org, without @", d)
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Remove deletes the user name and reports whether it existed.
func (u *Users) Remove(name string) bool {
	_, ok := u.byName[name]
	delete(u.byName, name)
	return ok
}

// Save writes the users to path atomically, mode 0600.
func (u *Users) Save(path string) error {
	var b bytes.Buffer
	b.WriteString("# ratelimitd console users: NAME ROLE ARGON2ID-HASH [DOMAIN,...]; edit with `ratelimitd web user add|remove`\n")
	for _, n := range u.Names() {
		x := u.byName[n]
		fmt.Fprintf(&b, "%s %s %s", x.Name, x.Role, x.hash)
		if len(x.Domains) > 0 {
			b.WriteString(" " + strings.Join(x.Domains, ","))
		}
		b.WriteByte('\n')
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return fmt.Errorf("web: users file: %w", err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".web-users-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Verify reports whether password is name's; an unknown name costs the
// same work, so timing does not tell which names exist.
func (u *Users) Verify(name string, password []byte) (User, bool) {
	x, ok := u.byName[name]
	h := x.hash
	if !ok {
		h = dummyHash()
	}
	return x, checkPassword(h, password) && ok
}

func hashPassword(password []byte) (string, error) {
	return argon2id.CreateHash(string(password), &argon2id.Params{Memory: hashCost.memory, Iterations: hashCost.time,
		Parallelism: argonThreads, SaltLength: argonSaltLen, KeyLength: argonKeyLen})
}

// checkHash checks a PHC argon2id string; its errors never echo the hash.
func checkHash(h string) error {
	p, salt, key, err := argon2id.DecodeHash(h)
	switch {
	case err != nil:
		return errors.New("not an argon2id hash")
	case p.Memory < 8*uint32(max(p.Parallelism, 1)) || p.Memory > maxArgonMemory || p.Iterations < 1 || p.Iterations > maxArgonTime || p.Parallelism < 1:
		return errors.New("argon2id parameters out of range")
	case len(salt) < 8 || len(key) < 16 || len(key) > 64:
		return errors.New("bad argon2id salt or hash")
	}
	return nil
}

func checkPassword(h string, password []byte) bool {
	if checkHash(h) != nil {
		return false
	}
	ok, err := argon2id.ComparePasswordAndHash(string(password), h)
	return err == nil && ok
}

// dummyHash is verified against for unknown user names.
var dummyHash = sync.OnceValue(func() string {
	h, err := hashPassword([]byte("no such user"))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return h
})
