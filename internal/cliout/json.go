package cliout

import (
	"encoding/json"
	"io"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// JSON writes v as indented JSON and a newline. Strings are exact: runes
// unsafe on a terminal that encoding/json leaves raw (DEL, C1 and
// bidirectional controls) are written as \uXXXX escapes
// (termsafe.NewJSONWriter), so the text passes the command line's output
// sanitiser unchanged and decodes to the same value.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// JSONList writes a list as one indented JSON array, [] when empty: the
// --json convention of the command line is one JSON document per command
// (an object for one thing, an array for a list); JSON Lines are only for
// streams written to a file (trace from-maillog, simulate --format jsonl).
func JSONList[T any](w io.Writer, vs []T) error {
	if vs == nil {
		vs = []T{}
	}
	return JSON(w, vs)
}
