//go:build !unix

package redistest

import "testing"

// Exclusive does nothing where flock is not available: the tests that
// call it may then overlap with other packages' tests.
func Exclusive(testing.TB) {}
