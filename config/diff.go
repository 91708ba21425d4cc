package config

import (
	"reflect"
	"strings"
)

// RestartKeys lists, as TOML keys ("server.admin_socket",
// "quarantine.max_age"), the settings of the [server], [quarantine],
// [milter], [notify] and [store] tables that differ between running and
// loaded. A SIGHUP reload applies the [policy] table and the [[limit]]
// stack at once; these other settings (listeners, state directory,
// quarantine, milter, notifications, rate store) take effect only when the
// daemon is restarted, so the daemon logs them and shows them in
// `ratelimitd status`. Both files must have been validated (defaults
// filled). The result is sorted by table, then by field order; nil when
// nothing differs.
func RestartKeys(running, loaded *File) []string {
	var keys []string
	for _, t := range []struct {
		table string
		a, b  any
	}{
		{"server", running.Server, loaded.Server},
		{"quarantine", running.Quarantine, loaded.Quarantine},
		{"milter", running.Milter, loaded.Milter},
		{"notify", running.Notify, loaded.Notify},
		{"store", running.Store, loaded.Store},
	} {
		va, vb := reflect.ValueOf(t.a), reflect.ValueOf(t.b)
		for i := range va.NumField() {
			f := va.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
				keys = append(keys, t.table+"."+name)
			}
		}
	}
	return keys
}
