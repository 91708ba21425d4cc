package cliout

import (
	"encoding/json"
	"io"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// JSON writes v as indented JSON, runes unsafe on a terminal escaped
// (termsafe.NewJSONWriter): exact, and unchanged by the output sanitiser.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// JSONList writes vs as one JSON array, [] when empty: --json prints one
// document per command.
func JSONList[T any](w io.Writer, vs []T) error {
	if vs == nil {
		vs = []T{}
	}
	return JSON(w, vs)
}
