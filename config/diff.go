package config

import (
	"reflect"
	"strings"
)

// RestartKeys lists, as TOML keys ("server.admin_socket",
// "quarantine.max_age"), the settings of the [server], [quarantine],
// [milter], [notify], [store], [web] and [events] tables that differ between running and
// loaded. A SIGHUP reload applies the [policy] table and the [[limit]]
// stack at once; these other settings (listeners, state directory,
// quarantine, milter, notifications, rate store, console, event
// history) take effect only when the
// daemon is restarted, so the daemon logs them and shows them in
// `ratelimitd status`. Both files must have been validated (defaults
// filled). The tables are restartTables, which the configuration reference
// also uses. The result is sorted by table, then by field order; nil when
// nothing differs.
func RestartKeys(running, loaded *File) []string {
	var keys []string
	ra, rb := reflect.ValueOf(*running), reflect.ValueOf(*loaded)
	for _, table := range restartTables {
		va, vb := tableField(ra, table), tableField(rb, table)
		for i := range va.NumField() {
			f := va.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
				keys = append(keys, table+"."+name)
			}
		}
	}
	return keys
}

// tableField is the field of the File value f whose toml tag is table.
func tableField(f reflect.Value, table string) reflect.Value {
	for i := range f.NumField() {
		if name, _, _ := strings.Cut(f.Type().Field(i).Tag.Get("toml"), ","); name == table {
			return f.Field(i)
		}
	}
	panic("config: no table " + table + " in File") // restartTables names File's fields
}
