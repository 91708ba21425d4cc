package milter

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/textproto"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// session is go-milter's Milter for one connection, called one event at a
// time; message state is reset explicitly (MAIL, abort, end of message).
type session struct {
	c *conn

	clientAddr, clientName, clientPtr string // SMFIC_CONNECT or {client_*}
	helo                              string
	messages                          int  // messages begun (MAIL) on this connection
	nonSMTP                           bool // Postfix's non-SMTP emulation (nonSMTPClient)

	msg *message // nil outside a transaction
}

// message is one transaction, from MAIL to its end or abort.
type message struct {
	instance string
	sender   string
	// {auth_type}, {auth_authen}, {auth_author}
	saslMethod, saslUser, saslSender string
	queueID                          string // {i}
	localUser                        string // a first header LocalUserHeader on a non-SMTP connection
	headers                          int

	recipients  []string        // accepted
	rcpt        policy.Decision // the accepted recipients' decision ahead of the others
	warnHeaders []string        // Decision.Header of every Warn, deduplicated

	decided   bool   // whether to keep it was decided (at the first header or body byte)
	buf       *spool // the message kept; nil if not kept, or dropped as too large
	size      int64  // bytes of the whole message, kept or not
	truncated bool   // the message exceeded MaxMessageSize and was dropped
	eoh       bool   // the empty line after the header has been added
}

// release frees the message's buffer (memory and spool file).
func (m *message) release() {
	if m != nil && m.buf != nil {
		m.buf.close()
		m.buf = nil
	}
}

// dropMsg ends the current transaction's state.
func (s *session) dropMsg() {
	s.msg.release()
	s.msg = nil
}

// Default reply texts.
const (
	textFault       = "Temporary rate limit failure, try again later"
	textFreezeFault = "Temporary quarantine failure, try again later"
	textTooLarge    = "Message too large to quarantine, try again later"
	textNoHold      = "Message cannot be held, try again later"
)

// recoverTo, deferred in every event handler, is the milter's one
// recover: the command is temp-failed and the connection closed.
func (s *session) recoverTo(event string, resp *gomilter.Response, err *error) {
	r := recover()
	if r == nil {
		return
	}
	s.c.log.Error("panic in milter session; temp-failing and closing the connection",
		"event", event, "panic", r, "stack", string(debug.Stack()))
	s.c.srv.metrics().Fault(mta.FaultPanic)
	s.c.poisoned = true
	if resp != nil {
		*resp = reply(451, "4.3.0", textFault)
	}
	if err != nil {
		*err = nil
	}
}

// absorb takes the latest SMFIC_MACRO packet's macros, braced or not.
func (s *session) absorb(macros map[string]string) {
	if len(macros) == 0 {
		return
	}
	// An empty client or queue ID macro is ignored; an empty auth one is taken.
	set := func(name string, dst *string, empty bool) {
		if v, ok := macro(macros, name); ok && (empty || v != "") {
			*dst = v
		}
	}
	set("client_addr", &s.clientAddr, false)
	set("client_name", &s.clientName, false)
	set("client_ptr", &s.clientPtr, false)
	if m := s.msg; m != nil {
		set("i", &m.queueID, false)
		set("auth_type", &m.saslMethod, true)
		set("auth_authen", &m.saslUser, true)
		set("auth_author", &m.saslSender, true)
	}
}

func macro(macros map[string]string, name string) (string, bool) {
	if v, ok := macros["{"+name+"}"]; ok {
		return v, true
	}
	v, ok := macros[name]
	return v, ok
}

// Connect implements go-milter's Milter (SMFIC_CONNECT).
func (s *session) Connect(host string, family string, port uint16, addr net.IP, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("connect", &resp, &err)
	if addr != nil {
		s.clientAddr = addr.String()
	}
	// "[address]" is an unverified name: "unknown" in policy delegation.
	if host != "" && !strings.HasPrefix(host, "[") {
		s.clientName = host
	} else {
		s.clientName = "unknown"
	}
	s.nonSMTP = nonSMTPClient(host, port, addr)
	s.absorb(m.Macros)
	s.c.log.Debug("milter connect", "client", s.clientName, "client_addr", s.clientAddr, "family", family)
	return gomilter.RespContinue, nil
}

// Helo implements go-milter's Milter (SMFIC_HELO).
func (s *session) Helo(name string, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("helo", &resp, &err)
	s.helo = name
	s.absorb(m.Macros)
	return gomilter.RespContinue, nil
}

// MailFrom implements go-milter's Milter (SMFIC_MAIL): a new transaction.
func (s *session) MailFrom(from string, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("mail", &resp, &err)
	s.begin()
	s.msg.sender = from
	s.absorb(m.Macros)
	if v, ok := macro(m.Macros, "mail_addr"); ok {
		s.msg.sender = v
	}
	return gomilter.RespContinue, nil
}

// begin starts a new transaction.
func (s *session) begin() {
	s.dropMsg()
	s.messages++
	s.msg = &message{instance: s.c.srv.instance + "." + strconv.FormatUint(s.c.id, 10) + "." + strconv.Itoa(s.messages)}
}

// RcptTo implements go-milter's Milter (SMFIC_RCPT): Defer and Reject
// refuse this recipient; any other action is kept for the end of message.
func (s *session) RcptTo(rcpt string, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("rcpt", &resp, &err)
	if s.msg == nil { // RCPT without MAIL: not from a sane MTA
		s.begin()
	}
	s.absorb(m.Macros)
	if v, ok := macro(m.Macros, "rcpt_addr"); ok && v != "" {
		rcpt = v
	}
	req := s.request(policy.StateRcpt)
	req.Recipient = rcpt
	d := s.decide(&req)
	if d.Action == policy.Defer || d.Action == policy.Reject {
		return reply(mta.Refusal(&d)), nil
	}
	msg := s.msg
	msg.recipients = append(msg.recipients, rcpt)
	if d.Ahead(msg.rcpt) {
		msg.rcpt = d
	}
	msg.noteWarn(d)
	return gomilter.RespContinue, nil
}

// noteWarn remembers the header of a Warn decision.
func (m *message) noteWarn(d policy.Decision) {
	if d.Action == policy.Warn && d.Header != "" && !slices.Contains(m.warnHeaders, d.Header) {
		m.warnHeaders = append(m.warnHeaders, d.Header)
	}
}

// Header implements go-milter's Milter (SMFIC_HEADER).
func (s *session) Header(name string, value string, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("header", &resp, &err)
	s.absorb(m.Macros)
	if s.msg == nil {
		return gomilter.RespContinue, nil
	}
	if s.msg.headers++; s.msg.headers == 1 && s.nonSMTP && strings.EqualFold(name, LocalUserHeader) {
		s.msg.localUser, _ = localUser(value)
	}
	value = strings.ReplaceAll(strings.ReplaceAll(value, "\r\n", "\n"), "\n", "\r\n") // every line break CRLF
	s.add([]byte(name + ": " + value + "\r\n"))
	return gomilter.RespContinue, nil
}

// Headers implements go-milter's Milter (SMFIC_EOH).
func (s *session) Headers(_ textproto.MIMEHeader, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("eoh", &resp, &err)
	s.absorb(m.Macros)
	if s.msg != nil {
		s.endHeader()
	}
	return gomilter.RespContinue, nil
}

// BodyChunk implements go-milter's Milter (SMFIC_BODY).
func (s *session) BodyChunk(chunk []byte, m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("body", &resp, &err)
	s.absorb(m.Macros)
	if s.msg != nil {
		s.endHeader()
		s.add(chunk)
	}
	return gomilter.RespContinue, nil
}

// add counts p in the size and keeps it, up to MaxMessageSize, if kept.
func (s *session) add(p []byte) {
	m := s.msg
	m.size += int64(len(p))
	if !m.decided {
		s.decideKeep()
	}
	if m.buf == nil {
		return
	}
	if m.buf.n+int64(len(p)) > s.c.srv.maxMessageSize {
		m.truncated = true
		m.release()
		return
	}
	if err := m.buf.write(p); err != nil {
		s.c.log.Error("cannot keep the message for freezing; it will be temp-failed if it must be frozen",
			"err", err, "spool_dir", m.buf.dir)
		s.c.srv.metrics().Fault(mta.FaultSpool)
	}
}

// decideKeep decides at the first header or body byte whether to keep the
// message: a RCPT decision was Freeze, or the FreezeAdvisor says so.
func (s *session) decideKeep() {
	m, srv := s.msg, s.c.srv
	m.decided = true
	if adv, ok := srv.Decider.(FreezeAdvisor); ok && m.rcpt.Action != policy.Freeze {
		req := s.request(policy.StateData)
		ctx, cancel := context.WithTimeout(srv.life.BaseContext(), DefaultDecideTimeout)
		defer cancel()
		if !adv.MayFreeze(ctx, &req) {
			return
		}
	}
	m.buf = &spool{dir: srv.SpoolDir, threshold: srv.spoolThreshold}
}

// endHeader adds the empty line between header and body, once.
func (s *session) endHeader() {
	if !s.msg.eoh {
		s.msg.eoh = true
		s.add([]byte("\r\n"))
	}
}

// Abort implements go-milter's Milter (SMFIC_ABORT): the transaction ends.
func (s *session) Abort(_ *gomilter.Modifier) (err error) {
	defer s.recoverTo("abort", nil, &err)
	s.dropMsg()
	return nil
}

// Body implements go-milter's Milter (SMFIC_BODYEOB): decide at
// END-OF-MESSAGE and apply, of it and the RCPT decisions, the one of the
// limit earliest in the stack (Decision.Ahead).
func (s *session) Body(m *gomilter.Modifier) (resp gomilter.Response, err error) {
	defer s.recoverTo("eom", &resp, &err)
	s.absorb(m.Macros)
	msg := s.msg
	if msg == nil { // end of message without MAIL: nothing to decide
		return gomilter.RespAccept, nil
	}
	defer s.dropMsg()
	s.endHeader()

	req := s.request(policy.StateEndOfMessage)
	req.Size = msg.size
	d := s.decide(&req)
	msg.noteWarn(d)
	if msg.rcpt.Ahead(d) {
		d = msg.rcpt
	}
	return s.apply(m, msg, req, d)
}

// apply carries out the final decision d on the message.
func (s *session) apply(m *gomilter.Modifier, msg *message, req policy.Request, d policy.Decision) (gomilter.Response, error) {
	qm := &Message{Request: req, Recipients: msg.recipients}
	log := s.c.log.With("queue_id", req.QueueID, "action", d.Action.String(), "limit", d.Limit, "key", d.Key)
	switch d.Action {
	case policy.Pass:
		return gomilter.RespAccept, nil
	case policy.Warn:
		if err := s.addHeaders(m, msg); err != nil {
			return nil, err
		}
		return gomilter.RespAccept, nil
	case policy.Defer, policy.Reject:
		return reply(mta.Refusal(&d)), nil
	case policy.Hold:
		return s.hold(m, msg, qm, d, log)
	case policy.Freeze:
		return s.freeze(msg, qm, d, log)
	}
	log.Warn("unknown action; accepting") // fail open
	return gomilter.RespAccept, nil
}

// hold has the daemon record the hold (Quarantine.Hold: a hold it could
// not record comes back as a defer), then tells the MTA to quarantine.
func (s *session) hold(m *gomilter.Modifier, msg *message, qm *Message, d policy.Decision, log *slog.Logger) (gomilter.Response, error) {
	c, srv := s.c, s.c.srv
	if !c.canDo(gomilter.OptQuarantine) {
		log.Error("cannot hold: the MTA did not offer the quarantine action; temp-failing")
		srv.metrics().Fault(mta.FaultNoQuarantineAction)
		return reply(451, "4.3.0", textNoHold), nil
	}
	if srv.Quarantine != nil {
		ctx, cancel := context.WithTimeout(srv.life.BaseContext(), DefaultQuarantineTimeout)
		d = srv.Quarantine.Hold(ctx, qm, d)
		cancel()
		if d.Action != policy.Hold {
			return reply(mta.Refusal(&d)), nil
		}
	} else {
		log.Warn("no quarantine configured: held message not recorded")
		srv.metrics().Fault(mta.FaultHoldRecord)
	}
	if err := m.Quarantine(quarantineReason(d)); err != nil {
		return nil, err
	}
	if err := s.addHeaders(m, msg); err != nil {
		return nil, err
	}
	log.Info("message held")
	return gomilter.RespAccept, nil
}

// freeze stores the message (Quarantine.Freeze) and, only once it is
// durable, tells the MTA to discard its copy; any failure temp-fails.
func (s *session) freeze(msg *message, qm *Message, d policy.Decision, log *slog.Logger) (gomilter.Response, error) {
	srv := s.c.srv
	fail := func(msg string, err error, args ...any) (gomilter.Response, error) {
		log.Error(msg, append([]any{"err", err}, args...)...)
		srv.metrics().Fault(mta.FaultFreeze)
		if errors.Is(err, ErrMessageTooLarge) {
			return reply(452, "4.3.4", textTooLarge), nil
		}
		return reply(451, "4.3.0", textFreezeFault), nil
	}
	switch {
	case srv.Quarantine == nil:
		return fail("cannot freeze; temp-failing", ErrNoQuarantine)
	case msg.truncated:
		return fail("cannot freeze; temp-failing", ErrMessageTooLarge, "size", msg.size, "max_message_size", srv.maxMessageSize)
	case msg.buf == nil:
		return fail("cannot freeze; temp-failing", ErrNotKept)
	}
	body, err := msg.buf.reader()
	if err != nil {
		return fail("cannot freeze; temp-failing", err)
	}
	qm.Body, qm.Size = body, msg.buf.n
	ctx, cancel := context.WithTimeout(srv.life.BaseContext(), DefaultQuarantineTimeout)
	id, err := srv.Quarantine.Freeze(ctx, qm, d)
	cancel()
	if err != nil {
		return fail("freezing failed; temp-failing the message", err)
	}
	// Durable in the quarantine: only now may the MTA drop its copy.
	log.Info("message frozen; MTA told to discard its copy", "quarantine_id", id, "size", msg.size)
	return gomilter.RespDiscard, nil
}

// addHeaders adds the Warn decisions' headers, if the MTA allows it.
func (s *session) addHeaders(m *gomilter.Modifier, msg *message) error {
	for _, h := range msg.warnHeaders {
		name, value, ok := splitHeader(h)
		if !ok {
			s.c.log.Warn("not adding malformed warn header", "header", h)
			continue
		}
		if !s.c.canDo(gomilter.OptAddHeader) {
			s.c.log.Warn("not adding warn header: the MTA did not offer header additions", "header", name)
			continue
		}
		if err := m.AddHeader(name, value); err != nil {
			return err
		}
	}
	return nil
}

// request returns the policy request for the current transaction; after
// RCPT with the recipients' count (and the recipient if only one).
func (s *session) request(state string) policy.Request {
	msg := s.msg
	req := policy.Request{
		ProtocolState:     state,
		HeloName:          s.helo,
		QueueID:           msg.queueID,
		Sender:            msg.sender,
		ClientAddress:     s.clientAddr,
		ClientName:        s.clientName,
		ReverseClientName: s.clientPtr,
		Instance:          msg.instance,
		SASLMethod:        msg.saslMethod,
		SASLUsername:      msg.saslUser,
		SASLSender:        msg.saslSender,
		LocalUser:         msg.localUser,
		Stage:             policy.ViaMilter,
	}
	if state != policy.StateRcpt {
		req.RecipientCount = len(msg.recipients)
		if len(msg.recipients) == 1 {
			req.Recipient = msg.recipients[0]
		}
	}
	return req
}

// decide calls the Decider, logs and counts the decision.
func (s *session) decide(req *policy.Request) policy.Decision {
	srv := s.c.srv
	ctx, cancel := context.WithTimeout(srv.life.BaseContext(), DefaultDecideTimeout)
	defer cancel()
	start := time.Now()
	req.Received = start
	d := srv.Decider.Decide(ctx, req)
	srv.metrics().Decision(req.ProtocolState, d.Action, time.Since(start))
	mta.LogDecision(s.c.log, srv.metrics(), req, &d)
	return d
}

// quarantineReason is the SMFIR_QUARANTINE reason, never empty.
func quarantineReason(d policy.Decision) string {
	r := "ratelimitd"
	if d.Limit != "" {
		r += " limit " + d.Limit
	}
	if t := cmp.Or(d.Reason, d.Text); t != "" {
		r += ": " + t
	}
	return mta.ReplyText(r, mta.MaxTextLen)
}

var _ gomilter.Milter = (*session)(nil)

// LocalUserHeader carries the uid of a local (sendmail) submission to the
// milter: Postfix does not pass pickup's Received: header to milters, so
// docs/postfix.md ("Local submissions") has pickup's cleanup PREPEND it.
const LocalUserHeader = "X-Ratelimitd-Local-User"

// nonSMTPClient reports whether a connect is Postfix's emulation for
// non-SMTP mail (non_smtpd_milters, MILTER_README): client localhost
// [127.0.0.1] on port 0, which no SMTP client has.
func nonSMTPClient(host string, port uint16, addr net.IP) bool {
	return port == 0 && host == "localhost" && addr != nil && addr.IsLoopback()
}

// localUser returns the uid in a LocalUserHeader value: 1 to 10 ASCII
// digits, surrounding white space ignored; ok is false for anything else.
func localUser(value string) (uid string, ok bool) {
	v := strings.TrimSpace(value)
	if len(v) == 0 || len(v) > 10 || strings.Trim(v, "0123456789") != "" {
		return "", false
	}
	return v, true
}

// maxHeaderLine is the longest header line (without CRLF) AddHeader writes
// (RFC 5322, section 2.1.1).
const maxHeaderLine = 998

// reply returns an SMFIR_REPLYCODE "code enhanced text", text through
// mta.ReplyText and '%' doubled (Sendmail reads a format; milter8.c).
// enhanced must start with code's first digit (Postfix checks).
func reply(code int, enhanced, text string) gomilter.Response {
	r := strconv.Itoa(code) + " " + enhanced
	if text = mta.ReplyText(text, mta.MaxTextLen); text != "" {
		r += " " + strings.ReplaceAll(text, "%", "%%")
	}
	return gomilter.NewResponseStr(byte(gomilter.ActReplyCode), r)
}

// splitHeader splits a Decision.Header for AddHeader (mta.HeaderField): a
// name of at most 200 bytes, the value one line within 998 bytes.
func splitHeader(h string) (name, value string, ok bool) {
	name, value, ok = mta.HeaderField(h)
	if !ok || len(name) > 200 {
		return "", "", false
	}
	return name, mta.ReplyText(strings.TrimLeft(value, " \t"), maxHeaderLine-len(name)-2), true
}
