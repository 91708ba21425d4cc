package cliout

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Confirm asks question with " [y/N] " and reports whether the line read
// from in is "y" or "yes" (any case).
func Confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return true
	}
	fmt.Fprintln(out)
	return false
}

// Create opens the output of a -o flag: the file at path (truncated), or
// stdout for "" and "-"; the function returned closes it.
func Create(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}
