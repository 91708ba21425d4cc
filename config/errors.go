package config

import "strings"

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
