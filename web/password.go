package web

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// ReadPassword reads a password for `ratelimitd web user add`: in's first
// line with fromStdin, else twice from terminal in, echo off, prompting on
// prompts. Errors: not a terminal, the entries differ, reading failed.
func ReadPassword(in io.Reader, prompts io.Writer, fromStdin bool) ([]byte, error) {
	if fromStdin {
		line, err := bufio.NewReader(in).ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, errors.New("standard input is not a terminal: use --password-stdin")
	}
	ask := func(prompt string) ([]byte, error) {
		fmt.Fprint(prompts, prompt)
		defer fmt.Fprintln(prompts)
		return term.ReadPassword(int(f.Fd()))
	}
	pw, err := ask("Password: ")
	if err != nil {
		return nil, err
	}
	again, err := ask("Again: ")
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(pw, again) {
		return nil, errors.New("the passwords differ")
	}
	return pw, nil
}
