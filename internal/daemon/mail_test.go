package daemon

import (
	"errors"
	"fmt"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// sendAs sends message n of SASL user through the Postfix pf to
// rcpt@example.net.
func sendAs(t testing.TB, pf *mtatest.Postfix, user string, n int) error {
	return mtatest.Send(t, pf.Addr(), mtatest.Mail{
		Login: user, ClientAddr: "192.0.2.7",
		From: user + "@example.org", To: []string{"rcpt@example.net"},
		Data: mtatest.BuildMessage(user+"@example.org", "rcpt@example.net", fmt.Sprintf("message %d from %s", n, user), "hello\n"),
	})
}

// smtpCode is err's SMTP reply code and enhanced code ("4.7.1"), or 0 and
// "" if err is no SMTP reply.
func smtpCode(err error) (int, string) {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return se.Code, fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2])
	}
	return 0, ""
}
