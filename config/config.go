// Package config reads ratelimitd's TOML configuration file: strict
// decoding, every error reported with its key, the embedded default
// (configs/ratelimitd.toml) when no file is given. Every key and its
// default are written once, in reference.go's keys table.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/ratelimitd/ratelimitd/configs"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
)

// File is the whole configuration file, one field per table.
type File struct {
	Policy     Policy               `toml:"policy"`
	Limits     []policy.LimitConfig `toml:"limit"` // the stack, in order
	Server     Server               `toml:"server"`
	Quarantine Quarantine           `toml:"quarantine"`
	Milter     Milter               `toml:"milter"`
	Notify     notify.Config        `toml:"notify"`
	Store      Store                `toml:"store"`
	Web        Web                  `toml:"web"`
	Events     Events               `toml:"events"`
	Outcome    Outcome              `toml:"outcome"`

	// NoLimits is set by [policy] limits = "none": no [[limit]] on purpose.
	NoLimits bool `toml:"-"`
	// Source is the path read, or EmbeddedSource.
	Source string `toml:"-"`
}

// NoLimitsValue is the [policy] limits that allows no [[limit]] table.
const NoLimitsValue = "none"

// Policy is the [policy] table: policy.Config and the limits switch.
type Policy struct {
	policy.Config
	Limits *string `toml:"limits"` // NoLimitsValue, or nil
}

// EmbeddedSource is File.Source for the embedded default configuration.
const EmbeddedSource = "(embedded default)"

// ErrInvalid wraps every error Load and Parse return for an invalid file.
var ErrInvalid = errors.New("config: invalid")

// Load reads and validates the file at path; path "" means the embedded
// default. The error joins every problem found, each naming its key.
func Load(path string) (*File, error) {
	if path == "" {
		return Parse(configs.Default, EmbeddedSource)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes and validates a configuration read from source.
func Parse(data []byte, source string) (*File, error) {
	f := &File{Source: source}
	md, err := toml.Decode(string(data), f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, describeTOMLError(data, source, err))
	}
	var errs []error
	for _, k := range md.Undecoded() {
		errs = append(errs, fmt.Errorf("unknown key %s", k))
	}
	if err := f.checkLimitsSwitch(); err != nil {
		errs = append(errs, err)
	}
	if err := policy.Check(f.PolicyConfig()); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	errs = append(errs, f.validate()...)
	for i, e := range errs {
		errs[i] = fmt.Errorf("%w: %s: %v", ErrInvalid, source, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// checkLimitsSwitch reads [policy] limits and refuses a file without
// [[limit]] tables unless it says limits = "none".
func (f *File) checkLimitsSwitch() error {
	switch v := f.Policy.Limits; {
	case v != nil && *v != NoLimitsValue:
		return fmt.Errorf("policy.limits: %q is not a valid value: the only one is %q (run without any limit)", *v, NoLimitsValue)
	case v != nil && len(f.Limits) > 0:
		return fmt.Errorf("policy.limits: %q but the file has %d [[limit]] tables: remove one or the other", *v, len(f.Limits))
	case v != nil:
		f.NoLimits = true
	case len(f.Limits) == 0:
		return fmt.Errorf("no [[limit]] table: every sender would be unlimited; add limits, or set [policy] limits = %q to run without any on purpose", NoLimitsValue)
	}
	return nil
}

// PolicyConfig returns the policy configuration with its limit stack.
func (f *File) PolicyConfig() policy.Config {
	c := f.Policy.Config
	c.Limits = f.Limits
	return c
}

// validate fills defaults and checks the non-policy sections.
func (f *File) validate() []error {
	if err := f.withDefaults(); err != nil {
		return []error{err}
	}
	f.Notify.WithDefaults()
	return slices.Concat(f.Server.validate(), f.Web.validate(), f.Events.validate(), f.Outcome.validate(),
		f.Store.validate(f.Limits, f.Server.RequestTimeout), f.Quarantine.validate(), f.Notify.Validate(),
		negativeDurations(f), limitRanges(f.Limits), f.Milter.validate(f.Server.AllowNetworks))
}

// withDefaults sets every key of the tables config owns that the file
// leaves out (zero, empty or nil) to its documented default (keys), and
// the defaults computed from others.
func (f *File) withDefaults() error {
	defaults := map[string]string{}
	for _, k := range keys {
		if table, _ := splitKey(k.name); k.def != "" && table != "policy" && table != "limit" && !strings.HasPrefix(table, "notify") {
			defaults[k.name] = k.def
		}
	}
	var err error
	walkKeys(reflect.ValueOf(f).Elem(), "", func(name string, v reflect.Value) {
		def, ok := defaults[name]
		if !ok || !(v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0) {
			return
		}
		p := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: v.Type(), Tag: `toml:"v"`}}))
		if _, derr := toml.Decode("v = "+def, p.Interface()); derr != nil {
			err = fmt.Errorf("config: default of %s: %w", name, derr) // a typing error in keys
		} else if d := p.Elem().Field(0); !d.IsZero() && !(d.Kind() == reflect.Slice && d.Len() == 0) {
			v.Set(d)
		}
	})
	if f.Server.StateDir == "" {
		f.Server.StateDir = DefaultStateDir()
	}
	if f.Server.AdminSocket == "" {
		f.Server.AdminSocket = filepath.Join(f.Server.StateDir, "admin.sock")
	}
	if f.Web.UsersFile == "" {
		f.Web.UsersFile = filepath.Join(f.Server.StateDir, "web-users")
	}
	return err
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ErrorLines splits an error of Load into one line per problem, without
// the "config: invalid: " prefix.
func ErrorLines(err error) []string {
	errs := unjoin(err)
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimPrefix(e.Error(), "config: invalid: ")
	}
	return out
}

var typeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// describeTOMLError formats a decoding error as "FILE:LINE:COL: message",
// the line and the one before it, and a caret; from Position.Start, as the
// library's column is wrong at the start of a line.
func describeTOMLError(data []byte, source string, err error) string {
	var perr toml.ParseError
	if !errors.As(err, &perr) {
		// Type mismatches come as "toml: line N (last key "K"): ...".
		m := typeErr.FindStringSubmatch(err.Error())
		if m == nil {
			return source + ": " + strings.TrimPrefix(err.Error(), "toml: ")
		}
		perr.Position.Line, _ = strconv.Atoi(m[1])
		perr.Position.Col = 1
		perr.LastKey, perr.Message = m[2], m[3]
	}
	msg := perr.Message
	if perr.LastKey != "" {
		msg += " (after key " + perr.LastKey + ")"
	}
	if perr.Usage != "" {
		msg += "\n" + strings.TrimSpace(perr.Usage)
	}
	line, col := perr.Position.Line, perr.Position.Col
	if start := perr.Position.Start; start > 0 && start <= len(data) {
		before := data[:start]
		line = bytes.Count(before, []byte("\n")) + 1
		col = start - (bytes.LastIndexByte(before, '\n') + 1) + 1
	}
	if line <= 0 {
		return fmt.Sprintf("%s: %s", source, msg)
	}
	out := fmt.Sprintf("%s:%d:%d: %s", source, line, col, msg)
	lines := strings.Split(string(data), "\n")
	for l := max(line-1, 1); l <= line && l <= len(lines); l++ {
		out += fmt.Sprintf("\n  %4d | %s", l, lines[l-1])
	}
	if line <= len(lines) {
		out += "\n       | " + strings.Repeat(" ", max(col-1, 0)) + "^"
	}
	return out
}
