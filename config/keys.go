package config

import (
	"reflect"
	"strings"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Key describes one configuration key for the reference that
// `ratelimitd config reference` prints (docs/configuration.md). The
// key's type and whether SIGHUP applies it are not written here: they
// come from the structs the file decodes into (FileKeys) and from
// restartTables.
type Key struct {
	// Name is the key as "table.key" ("server.flush_interval"); the keys
	// of each [[limit]] table are "limit.KEY".
	Name string
	// Default is the default as a TOML value ("1s", 4000000), checked by
	// the package's tests against the defaults the loader fills; empty
	// when there is none or it cannot be written as a value.
	Default string
	// DefaultNote explains a default that is computed or applied
	// elsewhere (e.g. "min(1024, RLIMIT_NOFILE/2)").
	DefaultNote string
	// Unit is what a number counts ("bytes", "connections"), if anything.
	Unit string
	// Doc is one line: what the key does.
	Doc string
}

// FileKey is a key found in the configuration structs by reflection.
type FileKey struct {
	// Name is "table.key", as in Key.Name.
	Name string
	// Type is the Go type the key decodes into.
	Type reflect.Type
}

// FileKeys lists every key the configuration file accepts, in the order
// of the structs' fields, found by walking File (and the [policy] limits
// switch) by their toml tags. A table (a struct field) is walked, not
// listed; an embedded struct's keys belong to the embedding table.
func FileKeys() []FileKey {
	var keys []FileKey
	walkKeys(reflect.TypeFor[File](), "", &keys)
	walkKeys(reflect.TypeFor[limitsSwitch](), "", &keys)
	return keys
}

// leafTypes are struct or slice types that decode from one TOML value and
// are keys, not tables.
var leafTypes = map[reflect.Type]bool{
	reflect.TypeFor[policy.KeyList](): true,
	reflect.TypeFor[Commands]():       true,
}

func walkKeys(t reflect.Type, prefix string, keys *[]FileKey) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Tag.Get("toml") == "" {
			walkKeys(f.Type, prefix, keys) // promoted, e.g. notify.Retry
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && !leafTypes[ft]:
			walkKeys(ft, prefix+name+".", keys)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			walkKeys(ft.Elem(), prefix+name+".", keys) // [[limit]]
		default:
			*keys = append(*keys, FileKey{Name: prefix + name, Type: ft})
		}
	}
}

// TypeName is how the reference names a key's type.
func TypeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem() // *string: set or not; same syntax
	}
	switch t {
	case reflect.TypeFor[policy.Duration]():
		return "duration"
	case reflect.TypeFor[policy.Size]():
		return "size"
	case reflect.TypeFor[policy.KeyList]():
		return "string or list of strings"
	case reflect.TypeFor[Commands]():
		return "command or list of commands"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + TypeName(t.Elem()) + "s"
	case reflect.Map:
		return "table of " + TypeName(t.Elem()) + "s"
	}
	return t.String()
}

// restartTables are the top-level tables a SIGHUP reload does not apply:
// their settings keep their running values until the daemon restarts
// (RestartKeys reports the differences). The [policy] table and the
// [[limit]] stack are applied at once.
var restartTables = []string{"server", "quarantine", "milter", "notify", "store", "web", "events"}

// AppliedBySIGHUP reports whether a reload applies the key ("table.key").
func AppliedBySIGHUP(name string) bool {
	table, _, _ := strings.Cut(name, ".")
	for _, t := range restartTables {
		if t == table {
			return false
		}
	}
	return true
}

// The notify package's defaults, as the reference shows them.
var (
	defaultSubject       = quote(notify.DefaultSubject)
	defaultSenderSubject = quote(notify.DefaultSenderSubject)
)

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
