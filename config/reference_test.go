package config

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestReferenceCoversEveryKey: the reference documents exactly the keys
// the configuration structs decode, each once and in a known table, so a
// new field without a line in keys fails here.
func TestReferenceCoversEveryKey(t *testing.T) {
	known := map[string]bool{}
	for _, tb := range tables {
		known[tb.Name] = true
	}
	documented := map[string]bool{}
	for _, k := range keys {
		if documented[k.name] {
			t.Errorf("%s is documented twice in keys", k.name)
		}
		documented[k.name] = true
		if table, _ := splitKey(k.name); !known[table] {
			t.Errorf("%s: table %s is not in tables", k.name, table)
		}
		if k.doc == "" || strings.Contains(k.doc, "\n") {
			t.Errorf("%s: want a one-line description, got %q", k.name, k.doc)
		}
	}
	decoded := map[string]bool{}
	for name, typ := range fileKeys() {
		decoded[name] = true
		if !documented[name] {
			t.Errorf("%s (%s) is a configuration key without a line in keys (reference.go)", name, typ)
		}
	}
	for name := range documented {
		if !decoded[name] {
			t.Errorf("keys documents %s, which no configuration struct decodes", name)
		}
	}
	if len(decoded) < 80 {
		t.Errorf("only %d keys found in the structs", len(decoded))
	}
}

// TestReferenceDefaults: writing a key's documented default into the file
// gives the same configuration as leaving it out, for every key whose
// default the loader fills in (the [policy] and [[limit]] defaults are
// applied by the engine and left zero here, so they are not compared).
func TestReferenceDefaults(t *testing.T) {
	const limit = "[[limit]]\nname = \"x\"\nkey = \"sender\"\nlimit = 1\nperiod = \"1h\"\n"
	implicit, err := Parse([]byte(limit), "implicit.toml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, k := range keys {
		if k.def == "" {
			continue
		}
		table, key := splitKey(k.name)
		if table == "limit" {
			continue
		}
		text := "[" + table + "]\n" + key + " = " + k.def + "\n" + limit
		explicit, err := Parse([]byte(text), "explicit.toml")
		if err != nil {
			t.Errorf("%s: the documented default %s does not load: %v", k.name, k.def, err)
			continue
		}
		want := keyValue(reflect.ValueOf(implicit).Elem(), k.name)
		if want.IsZero() {
			continue // filled in later, by the engine
		}
		if got := keyValue(reflect.ValueOf(explicit).Elem(), k.name); !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Errorf("%s: documented default %s gives %v; left out, the loader fills in %v", k.name, k.def, got, want)
		}
		checked++
	}
	if checked < 40 {
		t.Errorf("only %d defaults checked", checked)
	}
}

// keyValue is the field of v that decodes key name ("notify.webhook.url").
func keyValue(v reflect.Value, name string) (found reflect.Value) {
	walkKeys(v, "", func(n string, fv reflect.Value) {
		if n == name {
			found = fv
		}
	})
	return found
}

// TestReferenceIsCommitted: docs/configuration.md is what `ratelimitd
// config reference` prints today.
func TestReferenceIsCommitted(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReference(&b); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, b.Bytes()) {
		t.Errorf("docs/configuration.md differs from the configuration's definitions: run\n\tgo run ./cmd/ratelimitd config reference > docs/configuration.md")
	}
}

// TestReferenceReloadColumn: the keys shown as applied by SIGHUP are those
// of the tables RestartKeys does not compare.
func TestReferenceReloadColumn(t *testing.T) {
	for name, want := range map[string]bool{
		"policy.subnet_v4": true, "policy.exempt.users": true, "limit.limit": true,
		"server.flush_interval": false, "quarantine.max_age": false, "milter.listen": false,
		"notify.webhook.url": false, "store.backend": false,
	} {
		if got := appliedBySIGHUP(name); got != want {
			t.Errorf("appliedBySIGHUP(%s) = %v, want %v", name, got, want)
		}
	}
	a, _ := Load("")
	b, _ := Load("")
	b.Server.LogLevel, b.Quarantine.AlertEvery, b.Milter.Listen = "debug", 3, "127.0.0.1:10032"
	b.Notify.QueueSize, b.Store.KeyPrefix = 7, "x:"
	got := RestartKeys(a, b)
	want := []string{"server.log_level", "quarantine.alert_every", "milter.listen", "notify.queue_size", "store.key_prefix"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RestartKeys = %v, want %v", got, want)
	}
}
