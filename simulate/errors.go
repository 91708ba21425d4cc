package simulate

import (
	"errors"
	"fmt"
)

var (
	// ErrTrace wraps every error about a trace's content, in a *LineError.
	ErrTrace = errors.New("simulate: invalid trace")
	// ErrFormat is returned for an unsupported trace, output or plot format.
	ErrFormat = errors.New("simulate: unknown format")
	// ErrTooLarge is returned for a trace of more than MaxRequests requests.
	ErrTooLarge = errors.New("simulate: trace too large")
)

// LineError is an error at a (1-based) line of a trace; it wraps ErrTrace.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns ErrTrace and the underlying error.
func (e *LineError) Unwrap() []error { return []error{ErrTrace, e.Err} }
