package config

import (
	"reflect"
	"strings"
)

// RestartKeys lists, in table then field order, the keys of restartTables
// ("server.admin_socket") whose values differ between running and loaded,
// both validated; a reload keeps their running values.
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
