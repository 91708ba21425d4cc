package cliout

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Confirm asks question on out with " [y/N] " and reads one line of in: it
// reports whether the answer is "y" or "yes" (any case); anything else,
// including end of input, is no (and ends the prompt's line).
func Confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
		return true
	}
	fmt.Fprintln(out)
	return false
}

// Create opens the output named by a -o/--output flag: the file at path
// (created or truncated), or stdout when path is "" or "-". The returned
// function closes the file (nothing for stdout).
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
