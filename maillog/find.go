package maillog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// SyslogPath is where Debian's and Ubuntu's rsyslog write the mail log.
const SyslogPath = "/var/log/mail.log"

// ErrNoLog is returned by FindLog when there is no mail log; it matches
// the OpenError of a missing log.
var ErrNoLog = errors.New("maillog: no mail log")

// noLogAdvice is what to do when Postfix writes no log file.
const noLogAdvice = "Postfix writes a log file only when main.cf sets maillog_file (Postfix 3.4 or later: " +
	"postconf -e maillog_file=/var/log/postfix.log; postfix reload) or a syslog daemon writes it " +
	"(Debian 12 installs none): set maillog_file or install rsyslog"

// FindLog returns `postconf -h maillog_file` if set, else SyslogPath if it
// exists, else an error wrapping ErrNoLog that names what it tried.
func FindLog(ctx context.Context) (string, error) {
	return findLog(ctx, "postconf", SyslogPath)
}

func findLog(ctx context.Context, postconf, syslogPath string) (string, error) {
	var tried []string
	if p, err := exec.LookPath(postconf); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, p, "-h", "maillog_file")
		cmd.Stdout, cmd.Stderr = &out, &errb
		switch err := cmd.Run(); {
		case err != nil:
			tried = append(tried, fmt.Sprintf("postconf -h maillog_file failed (%v: %s)", err, strings.TrimSpace(errb.String())))
		case strings.TrimSpace(out.String()) != "":
			return strings.TrimSpace(out.String()), nil
		default:
			tried = append(tried, "postconf -h maillog_file is empty")
		}
	} else {
		tried = append(tried, "postconf is not installed")
	}
	if _, err := os.Stat(syslogPath); err == nil {
		return syslogPath, nil
	} else {
		tried = append(tried, fmt.Sprintf("%s: %v", syslogPath, pathErrText(err)))
	}
	return "", fmt.Errorf("%w found (%s); %s", ErrNoLog, strings.Join(tried, "; "), noLogAdvice)
}

// OpenError is ReadFile's error for a log it cannot open; not wrapping the
// os error, it gets no --config advice from the command line.
type OpenError struct {
	Path string
	Err  error
}

func (e *OpenError) Error() string {
	msg := fmt.Sprintf("maillog: mail log %s: %s", e.Path, pathErrText(e.Err))
	if errors.Is(e.Err, os.ErrNotExist) {
		msg += "; " + noLogAdvice + " (run without a file argument to read the log postconf names)"
	}
	return msg
}

// Is reports ErrNoLog for a log that does not exist.
func (e *OpenError) Is(target error) bool {
	return target == ErrNoLog && errors.Is(e.Err, os.ErrNotExist)
}

// pathErrText is err without the "open PATH: " a *os.PathError adds.
func pathErrText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
