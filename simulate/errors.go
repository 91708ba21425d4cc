package simulate

import (
	"errors"
	"fmt"
)

var (
	// ErrTrace wraps every error about the content of a trace: a line that
	// is not valid JSON or CSV, an unknown field, a bad value. It comes
	// inside a *LineError naming the line.
	ErrTrace = errors.New("simulate: invalid trace")
	// ErrFormat is returned for a trace or plot format that is not
	// supported (by extension or by name).
	ErrFormat = errors.New("simulate: unknown format")
	// ErrTooLarge is returned when a trace expands (count, every, until)
	// to more than MaxRequests requests.
	ErrTooLarge = errors.New("simulate: trace too large")
)

// LineError is an error at one line of a trace. Errors wraps ErrTrace.
type LineError struct {
	// Line is the 1-based line number in the trace file.
	Line int
	// Err is the problem.
	Err error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns ErrTrace and the underlying error.
func (e *LineError) Unwrap() []error { return []error{ErrTrace, e.Err} }
