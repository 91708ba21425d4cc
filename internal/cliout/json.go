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

// JSONLines writes each element of vs as one line of JSON (JSON Lines),
// escaped as JSON is.
func JSONLines[T any](w io.Writer, vs []T) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}
