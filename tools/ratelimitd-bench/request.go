package main

import "strconv"

// A request template is one policy request rendered once, byte for byte as
// Postfix 3.8 sends it (the 31 attributes of testdata/postfix/rcpt.txt and
// eom.txt, in SMTPD_POLICY_README's order; Postfix 3.7 sends 29 of them),
// with fixed-width fields that are patched in place for each message: the
// user number (sender, sasl_username), the connection number and the
// message sequence number (instance, queue_id). A request therefore costs
// the client a few dozen byte stores, no formatting and no allocation.

// fieldKind says which number a patched field carries and how it is
// written.
type fieldKind uint8

const (
	fieldUser   fieldKind = iota // decimal, userDigits wide
	fieldConn                    // lower-case hex, connDigits wide
	fieldSeq                     // lower-case hex, seqDigits wide
	fieldConnUp                  // upper-case hex, connDigits wide (queue_id)
	fieldSeqUp                   // upper-case hex, seqDigits wide (queue_id)
	numFieldKinds
)

// Widths of the patched fields: up to 10,000,000 users, 65,536 connections
// and 2^32 messages per connection.
const (
	userDigits = 7
	connDigits = 4
	seqDigits  = 8
	// maxUsers is the number of distinct users the templates can name.
	maxUsers = 10_000_000
)

var fieldWidth = [numFieldKinds]int{userDigits, connDigits, seqDigits, connDigits, seqDigits}

// field is one patched place in a template.
type field struct {
	off  int
	kind fieldKind
}

// template is a rendered request and the places to patch.
type template struct {
	b      []byte
	fields []field
}

// templateBuilder renders a template attribute by attribute.
type templateBuilder struct{ t template }

func (tb *templateBuilder) lit(s string) { tb.t.b = append(tb.t.b, s...) }

func (tb *templateBuilder) num(k fieldKind) {
	tb.t.fields = append(tb.t.fields, field{off: len(tb.t.b), kind: k})
	for range fieldWidth[k] {
		tb.t.b = append(tb.t.b, '0')
	}
}

// attr appends name=value, where value is literal text.
func (tb *templateBuilder) attr(name, value string) {
	tb.lit(name)
	tb.lit("=")
	tb.lit(value)
	tb.lit("\n")
}

// user appends name=user<N>@example.org.
func (tb *templateBuilder) user(name string) {
	tb.lit(name)
	tb.lit("=user")
	tb.num(fieldUser)
	tb.lit("@example.org\n")
}

// Protocol states of the two request kinds.
const (
	stateRcpt = "RCPT"
	stateEOM  = "END-OF-MESSAGE"
)

// newTemplate renders the RCPT or END-OF-MESSAGE request of an
// authenticated submission client; rcpts is the recipient_count of an
// END-OF-MESSAGE request.
func newTemplate(state string, rcpts int) *template {
	var tb templateBuilder
	eom := state == stateEOM
	tb.attr("request", "smtpd_access_policy")
	tb.attr("protocol_state", state)
	tb.attr("protocol_name", "ESMTP")
	tb.attr("helo_name", "[192.168.1.23]")
	if eom {
		tb.lit("queue_id=")
		tb.num(fieldConnUp)
		tb.num(fieldSeqUp)
		tb.lit("\n")
	} else {
		tb.attr("queue_id", "")
	}
	tb.user("sender")
	if eom {
		tb.attr("recipient", "")
		tb.attr("recipient_count", strconv.Itoa(rcpts))
	} else {
		tb.attr("recipient", "bob@example.net")
		tb.attr("recipient_count", "0")
	}
	tb.attr("client_address", "192.0.2.17")
	tb.attr("client_name", "mua17.example.org")
	tb.attr("reverse_client_name", "mua17.example.org")
	// instance is the same for every request of one message.
	tb.lit("instance=")
	tb.num(fieldConn)
	tb.lit(".6553a0f1.")
	tb.num(fieldSeq)
	tb.lit(".0\n")
	tb.attr("sasl_method", "PLAIN")
	tb.user("sasl_username")
	tb.attr("sasl_sender", "")
	if eom {
		tb.attr("size", "48213")
	} else {
		tb.attr("size", "5123")
	}
	tb.attr("ccert_subject", "")
	tb.attr("ccert_issuer", "")
	tb.attr("ccert_fingerprint", "")
	tb.attr("encryption_protocol", "TLSv1.3")
	tb.attr("encryption_cipher", "TLS_AES_256_GCM_SHA384")
	tb.attr("encryption_keysize", "256")
	tb.attr("etrn_domain", "")
	tb.attr("stress", "")
	tb.attr("ccert_pubkey_fingerprint", "")
	tb.attr("client_port", "51234")
	tb.attr("policy_context", "submission")
	tb.attr("server_address", "198.51.100.25")
	tb.attr("server_port", "587")
	tb.attr("compatibility_level", "3.6")
	tb.attr("mail_version", "3.8.6")
	tb.lit("\n")
	return &tb.t
}

// set writes v into every field of kind k (v is taken modulo the field's
// range).
func (t *template) set(k fieldKind, v uint64) {
	for _, f := range t.fields {
		if f.kind != k {
			continue
		}
		dst := t.b[f.off : f.off+fieldWidth[k]]
		switch k {
		case fieldUser:
			putDec(dst, v)
		case fieldConnUp, fieldSeqUp:
			putHex(dst, v, upperHex)
		default:
			putHex(dst, v, lowerHex)
		}
	}
}

const (
	lowerHex = "0123456789abcdef"
	upperHex = "0123456789ABCDEF"
)

// putDec writes v in decimal, zero-padded to len(dst).
func putDec(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
}

// putHex writes v in hex, zero-padded to len(dst).
func putHex(dst []byte, v uint64, digits string) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&15]
		v >>= 4
	}
}

// message is a connection's pair of templates: the RCPT request sent for
// each recipient and the END-OF-MESSAGE request that ends the message.
type message struct {
	rcpt, eom *template
}

// newMessage returns the templates of connection conn, whose messages have
// rcpts recipients each.
func newMessage(conn int, rcpts int) *message {
	m := &message{rcpt: newTemplate(stateRcpt, rcpts), eom: newTemplate(stateEOM, rcpts)}
	for _, t := range []*template{m.rcpt, m.eom} {
		t.set(fieldConn, uint64(conn))
		t.set(fieldConnUp, uint64(conn))
	}
	return m
}

// next patches both templates for message number seq of user.
func (m *message) next(user int, seq uint64) {
	for _, t := range []*template{m.rcpt, m.eom} {
		t.set(fieldUser, uint64(user))
		t.set(fieldSeq, seq)
		t.set(fieldSeqUp, seq)
	}
}

// userName is the sasl_username (and sender) of user number n.
func userName(n int) string {
	b := []byte("user0000000@example.org")
	putDec(b[4:4+userDigits], uint64(n))
	return string(b)
}
