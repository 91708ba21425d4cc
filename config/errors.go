package config

import "strings"

// ErrorLines splits an error of Load (several problems joined with
// errors.Join) into one line per problem, without the "config: invalid: "
// prefix, for printing to an operator.
func ErrorLines(err error) []string {
	errs := unjoin(err)
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimPrefix(e.Error(), "config: invalid: ")
	}
	return out
}
