package web

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ReadPassword reads a password for `ratelimitd web user add`: the first
// line of in with fromStdin, else twice from the terminal in with echo
// off, prompting on prompts. Errors: in is not a terminal (without
// fromStdin), the two entries differ, reading failed.
func ReadPassword(in io.Reader, prompts io.Writer, fromStdin bool) ([]byte, error) {
	if fromStdin {
		line, err := bufio.NewReader(in).ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
	f, ok := in.(*os.File)
	if !ok {
		return nil, errors.New("no terminal to prompt on: use --password-stdin")
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, errors.New("standard input is not a terminal: use --password-stdin")
	}
	noEcho := *old
	noEcho.Lflag &^= unix.ECHO
	noEcho.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &noEcho); err != nil {
		return nil, err
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	rd := bufio.NewReader(f)
	ask := func(prompt string) ([]byte, error) {
		fmt.Fprint(prompts, prompt)
		line, err := rd.ReadBytes('\n')
		fmt.Fprintln(prompts)
		return bytes.TrimRight(line, "\r\n"), err
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
