package mtatest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/textproto"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Stage names the step of an SMTP transaction a reply belongs to.
type Stage string

// The stages of an SMTP transaction, in order.
const (
	StageConnect   Stage = "connect"     // TCP connect
	StageGreeting  Stage = "greeting"    // the server's 220 banner
	StageHello     Stage = "ehlo"        // EHLO (before and after XCLIENT)
	StageXCLIENT   Stage = "xclient"     // XCLIENT
	StageMail      Stage = "mail"        // MAIL FROM
	StageRcpt      Stage = "rcpt"        // RCPT TO, one per recipient
	StageData      Stage = "data"        // the DATA command (354 expected)
	StageEndOfData Stage = "end-of-data" // the reply after the message content
)

// Mail is one message to send with Send. Login and ClientAddr, when either
// is set, are sent with XCLIENT (LOGIN=, ADDR=) after a first EHLO.
type Mail struct {
	Login, ClientAddr string
	From              string   // the envelope sender; "" is the null sender <>
	To                []string // the envelope recipients
	Data              []byte   // the message; bare LF is sent as CRLF
}

// SendError is the failure of one stage; Err is a *smtp.SMTPError for an
// error reply.
type SendError struct {
	Stage Stage
	Rcpt  string // the recipient, for StageRcpt
	Err   error
}

func (e *SendError) Error() string {
	if e.Stage == StageRcpt {
		return fmt.Sprintf("mtatest: %s <%s>: %v", e.Stage, e.Rcpt, e.Err)
	}
	return fmt.Sprintf("mtatest: %s: %v", e.Stage, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// Code returns the SMTP reply code of the failure, or 0.
func (e *SendError) Code() int {
	var se *smtp.SMTPError
	if errors.As(e.Err, &se) {
		return se.Code
	}
	return 0
}

// Result is the outcome of a transaction.
type Result struct {
	Accepted []string     // the recipients accepted at RCPT
	Errors   []*SendError // the failures in order: one per stage, or per rejected recipient
	// Reply is the final reply text ("2.0.0 Ok: queued as 4F3A21C0A2"),
	// QueueID the ID in it.
	Reply, QueueID string
	Transcript     string // the whole SMTP conversation (C: and S: lines)
}

// Err returns errors.Join of the Errors: nil if none (errors.As finds a
// *SendError).
func (r *Result) Err() error {
	errs := make([]error, len(r.Errors))
	for i, e := range r.Errors {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Send is SendResult(t, addr, m).Err().
func Send(t testing.TB, addr string, m Mail) error {
	t.Helper()
	return SendResult(t, addr, m).Err()
}

// SendResult sends m to addr (DATA if any recipient was accepted), each
// command within 30 s. It never fails the test itself.
func SendResult(t testing.TB, addr string, m Mail) *Result {
	t.Helper()
	var tr SyncBuffer
	res := &Result{}
	defer func() { res.Transcript = tr.String() }()
	if len(m.To) == 0 {
		res.Errors = append(res.Errors, &SendError{Stage: StageRcpt, Err: errors.New("no recipients (Mail.To is empty)")})
		return res
	}
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		res.Errors = append(res.Errors, &SendError{Stage: StageConnect, Err: err})
		return res
	}
	c := &client{conn: &recordingConn{Conn: raw, tr: &tr}}
	c.tp = textproto.NewConn(c.conn)
	defer c.conn.Close()
	if stage, err := c.transact(m, res); err != nil {
		res.Errors = append(res.Errors, &SendError{Stage: stage, Err: err})
		if errors.As(err, new(*smtp.SMTPError)) {
			_, _ = c.cmd(221, "QUIT")
		}
	}
	return res
}

// client is one SMTP connection of SendResult.
type client struct {
	conn net.Conn
	tp   *textproto.Conn
}

// cmd sends the command line format (none if "") within 30 s and reads
// the reply, expecting code (25 matches 250 and 251); an error reply is a
// *smtp.SMTPError.
func (c *client) cmd(code int, format string, args ...any) (string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if line := fmt.Sprintf(format, args...); line != "" {
		if strings.ContainsAny(line, "\r\n") {
			return "", fmt.Errorf("mtatest: line break in command %q", line)
		}
		if err := c.tp.PrintfLine("%s", line); err != nil {
			return "", err
		}
	}
	_, msg, err := c.tp.ReadResponse(code)
	return msg, toSMTPError(err)
}

// transact runs SendResult's conversation on c, recording in res: the
// greeting, EHLO, with XCLIENT a second EHLO, the envelope and the data.
func (c *client) transact(m Mail, res *Result) (Stage, error) {
	if _, err := c.cmd(220, ""); err != nil {
		return StageGreeting, err
	}
	const helo = "client.mtatest.invalid"
	ext, err := c.cmd(250, "EHLO %s", helo)
	if err != nil {
		return StageHello, err
	}
	if m.Login != "" || m.ClientAddr != "" {
		if !hasExtension(ext, "XCLIENT") {
			return StageXCLIENT, errors.New("server does not offer XCLIENT to this client (smtpd_authorized_xclient_hosts)")
		}
		if _, err := c.cmd(220, "XCLIENT %s", xclientArgs(m)); err != nil {
			return StageXCLIENT, err
		}
		if ext, err = c.cmd(250, "EHLO %s", helo); err != nil {
			return StageHello, err
		}
	}
	body := ""
	if hasExtension(ext, "8BITMIME") {
		body = " BODY=8BITMIME"
	}
	if _, err := c.cmd(250, "MAIL FROM:<%s>%s", m.From, body); err != nil {
		return StageMail, err
	}
	for _, rcpt := range m.To {
		if _, err := c.cmd(25, "RCPT TO:<%s>", rcpt); err != nil {
			res.Errors = append(res.Errors, &SendError{Stage: StageRcpt, Rcpt: rcpt, Err: err})
			continue
		}
		res.Accepted = append(res.Accepted, rcpt)
	}
	if len(res.Accepted) == 0 {
		_, _ = c.cmd(250, "RSET")
		_, _ = c.cmd(221, "QUIT")
		return "", nil
	}
	if _, err := c.cmd(354, "DATA"); err != nil {
		return StageData, err
	}
	w := c.tp.DotWriter() // bare LF becomes CRLF, leading dots doubled
	if _, err := w.Write(m.Data); err != nil {
		return StageEndOfData, err
	}
	if err := w.Close(); err != nil {
		return StageEndOfData, err
	}
	if res.Reply, err = c.cmd(250, ""); err != nil {
		return StageEndOfData, err
	}
	if mm := queuedAsRE.FindStringSubmatch(res.Reply); mm != nil {
		res.QueueID = mm[1]
	}
	_, _ = c.cmd(221, "QUIT")
	return "", nil
}

var queuedAsRE = regexp.MustCompile(`queued as ([0-9A-Za-z]+)`)

func hasExtension(ehlo, name string) bool {
	for _, line := range strings.Split(ehlo, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.EqualFold(f[0], name) {
			return true
		}
	}
	return false
}

// xclientArgs builds the XCLIENT attribute list; values are xtext (RFC
// 3461) as the Postfix XCLIENT_README requires.
func xclientArgs(m Mail) string {
	var args []string
	if m.Login != "" {
		args = append(args, "LOGIN="+xtext(m.Login))
	}
	if m.ClientAddr != "" {
		addr := m.ClientAddr
		if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
			addr = "IPV6:" + addr
		}
		args = append(args, "ADDR="+xtext(addr))
	}
	return strings.Join(args, " ")
}

func xtext(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '!' || c > '~' || c == '+' || c == '=' {
			fmt.Fprintf(&b, "+%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// toSMTPError turns a textproto error into a *smtp.SMTPError, with the
// enhanced code (RFC 3463) that starts its text.
func toSMTPError(err error) error {
	var pe *textproto.Error
	if !errors.As(err, &pe) {
		return err
	}
	se := &smtp.SMTPError{Code: pe.Code, Message: pe.Msg}
	var ec smtp.EnhancedCode
	if code, msg, ok := strings.Cut(pe.Msg, " "); ok {
		_, err := fmt.Sscanf(code, "%d.%d.%d", &ec[0], &ec[1], &ec[2])
		if err == nil && fmt.Sprintf("%d.%d.%d", ec[0], ec[1], ec[2]) == code {
			se.EnhancedCode, se.Message = ec, strings.ReplaceAll(msg, "\n"+code+" ", "\n") // RFC 2034: on every line
		}
	}
	return se
}

// recordingConn copies the conversation to tr as "C: " and "S: " lines.
type recordingConn struct {
	net.Conn
	tr *SyncBuffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.tr.Write(prefixLines("S: ", p[:n]))
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.tr.Write(prefixLines("C: ", p[:n]))
	return n, err
}

func prefixLines(prefix string, p []byte) []byte {
	var b []byte
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line != "" {
			b = fmt.Appendf(b, "%s%s\n", prefix, strings.TrimRight(line, "\r\n"))
		}
	}
	return b
}

// BuildMessage returns an RFC 5322 text/plain message (RFC 2047 subject),
// CRLF line ends.
func BuildMessage(from, to, subject, body string) []byte {
	var id [12]byte
	_, _ = rand.Read(id[:])
	body = strings.ReplaceAll(body, "\r\n", "\n")
	body = strings.ReplaceAll(body, "\n", "\r\n")
	if !strings.HasSuffix(body, "\r\n") {
		body += "\r\n"
	}
	cte := "7bit"
	if strings.ContainsFunc(body, func(r rune) bool { return r >= 0x80 }) {
		cte = "8bit"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: <%s>\r\n", from)
	fmt.Fprintf(&b, "To: <%s>\r\n", to)
	fmt.Fprintf(&b, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", subject))
	fmt.Fprintf(&b, "Date: %s\r\n", time.Now().Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Message-ID: <%s@mtatest.invalid>\r\n", hex.EncodeToString(id[:]))
	b.WriteString("MIME-Version: 1.0\r\n")
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	fmt.Fprintf(&b, "Content-Transfer-Encoding: %s\r\n", cte)
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.Bytes()
}

// SyncBuffer is an io.Writer safe for concurrent writes, for collecting
// the log lines of servers under test. The zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PolicyAsk sends one Postfix policy delegation request (SMTPD_POLICY_README)
// with attrs ("name=value") to addr (host:port, or unix:PATH) over a new
// connection and returns the action line.
func PolicyAsk(t testing.TB, addr string, attrs ...string) string {
	t.Helper()
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", path
	}
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "request=smtpd_access_policy\n%s\n\n", strings.Join(attrs, "\n"))
	line, err := bufio.NewReader(c).ReadString('\n')
	must(t, err)
	return strings.TrimSpace(line)
}
