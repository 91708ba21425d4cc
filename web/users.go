package web

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Role is what a console user may do.
type Role string

// The roles: a Viewer reads every page; an Operator also acts (reset,
// suspend, resume, thaw, delete).
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

// argon2id parameters for new hashes: RFC 9106 section 4's second
// recommended option (t=3 passes, 64 MiB of memory) with 2 lanes. Stored
// hashes carry their own parameters, so these can grow later.
const (
	argonTime    = 3
	argonMemory  = 64 * 1024 // KiB
	argonThreads = 2
	argonKeyLen  = 32
	argonSaltLen = 16
	// maxArgonMemory bounds the memory a stored hash may ask for (1 GiB),
	// so that an edited users file cannot make each login exhaust memory.
	maxArgonMemory = 1024 * 1024
	maxArgonTime   = 16
)

// hashCost is the cost of new hashes: argonTime and argonMemory, lowered
// by the package's tests (each login of a test would otherwise cost
// 64 MiB and, under the race detector, seconds).
var hashCost = struct{ time, memory uint32 }{argonTime, argonMemory}

// validName is what a user name may be: letters, digits and ._@- (no
// space or colon, which separate the file's fields).
var validName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// User is one line of the users file.
type User struct {
	Name string
	Role Role
	// hash is the PHC string "$argon2id$v=19$m=...,t=...,p=...$salt$key";
	// it is never printed, logged or rendered.
	hash string
}

// String, GoString and LogValue name the user and role only, so that a
// User printed or logged by mistake never shows the hash.
func (u User) String() string       { return u.Name + " (" + string(u.Role) + ")" }
func (u User) GoString() string     { return "web.User{" + u.String() + "}" }
func (u User) LogValue() slog.Value { return slog.StringValue(u.String()) }

// Users is the console's users file: one user a line,
// "NAME ROLE $argon2id$v=19$m=65536,t=3,p=2$SALT$HASH" (salt and hash in
// unpadded base64), '#' starts a comment. The file is written with mode
// 0600. A Users value is not safe for concurrent modification; the
// server swaps whole values on reload.
type Users struct {
	byName map[string]User
}

// LoadUsers reads the users file at path. A missing file is an empty
// set of users (nobody can log in).
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
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("web: users file %s:%d: want NAME ROLE HASH", path, n)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("web: users file %s:%d: %v", path, n, err)
		}
		if !validName.MatchString(f[0]) {
			return nil, fmt.Errorf("web: users file %s:%d: invalid user name", path, n)
		}
		if _, _, err := parseHash(f[2]); err != nil {
			return nil, fmt.Errorf("web: users file %s:%d: user %s: %v", path, n, f[0], err)
		}
		u.byName[f[0]] = User{Name: f[0], Role: role, hash: f[2]}
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
	out := make([]string, 0, len(u.byName))
	for n := range u.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Set adds or replaces the user name with role and password.
func (u *Users) Set(name string, role Role, password []byte) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("web: user name %q: use 1 to 64 letters, digits and . _ @ -", name)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	if len(password) < 8 {
		return errors.New("web: the password must have at least 8 characters")
	}
	h, err := hashPassword(password)
	if err != nil {
		return err
	}
	u.byName[name] = User{Name: name, Role: role, hash: h}
	return nil
}

// Remove deletes the user name and reports whether it existed.
func (u *Users) Remove(name string) bool {
	_, ok := u.byName[name]
	delete(u.byName, name)
	return ok
}

// Save writes the users to path atomically (a temporary file in the same
// directory, fsync, rename) with mode 0600.
func (u *Users) Save(path string) error {
	var b bytes.Buffer
	b.WriteString("# ratelimitd console users: NAME ROLE ARGON2ID-HASH; edit with `ratelimitd web user add|remove`\n")
	for _, n := range u.Names() {
		x := u.byName[n]
		fmt.Fprintf(&b, "%s %s %s\n", x.Name, x.Role, x.hash)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("web: users file: %w", err)
	}
	f, err := os.CreateTemp(dir, ".web-users-*")
	if err != nil {
		return fmt.Errorf("web: users file: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("web: users file: %w", err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("web: users file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("web: users file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("web: users file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("web: users file: %w", err)
	}
	return nil
}

// Verify reports whether password is name's; it spends the same work on
// an unknown name (a dummy hash) so that timing does not tell which
// names exist.
func (u *Users) Verify(name string, password []byte) (User, bool) {
	x, ok := u.byName[name]
	h := x.hash
	if !ok {
		h = dummyHash()
	}
	good := checkPassword(h, password)
	return x, ok && good
}

var b64 = base64.RawStdEncoding

// hashPassword returns the PHC string of a new argon2id hash.
func hashPassword(password []byte) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey(password, salt, hashCost.time, hashCost.memory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, hashCost.memory, hashCost.time, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

type argonParams struct {
	time, memory uint32
	threads      uint8
	salt         []byte
}

// parseHash reads a PHC argon2id string, refusing parameters beyond the
// bounds above.
func parseHash(h string) (argonParams, []byte, error) {
	var p argonParams
	f := strings.Split(h, "$")
	if len(f) != 6 || f[0] != "" || f[1] != "argon2id" {
		return p, nil, errors.New("not an argon2id hash")
	}
	var v int
	if _, err := fmt.Sscanf(f[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, nil, errors.New("unsupported argon2 version")
	}
	if _, err := fmt.Sscanf(f[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &p.threads); err != nil {
		return p, nil, errors.New("bad argon2id parameters")
	}
	if p.memory < 8*uint32(max(p.threads, 1)) || p.memory > maxArgonMemory || p.time < 1 || p.time > maxArgonTime || p.threads < 1 {
		return p, nil, errors.New("argon2id parameters out of range")
	}
	salt, err := b64.DecodeString(f[4])
	if err != nil || len(salt) < 8 {
		return p, nil, errors.New("bad argon2id salt")
	}
	key, err := b64.DecodeString(f[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, errors.New("bad argon2id hash")
	}
	p.salt = salt
	return p, key, nil
}

func checkPassword(h string, password []byte) bool {
	p, key, err := parseHash(h)
	if err != nil {
		return false
	}
	got := argon2.IDKey(password, p.salt, p.time, p.memory, p.threads, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1
}

// dummyHash is verified against for unknown user names; made on first
// use, not at start-up.
var dummyHash = sync.OnceValue(func() string {
	h, err := hashPassword([]byte("no such user"))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return h
})
