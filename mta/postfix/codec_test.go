package postfix

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
)

// transcript reads testdata/postfix/name.
// readRequest reads one request from r into req with a new Decoder.
func readRequest(r *bufio.Reader, req *policy.Request) error { return NewDecoder(r).Decode(req) }

func transcript(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "postfix", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The Requests in testdata/postfix/rcpt.txt and eom.txt.
var (
	wantRCPT = policy.Request{
		ProtocolState:     policy.StateRcpt,
		ProtocolName:      "ESMTP",
		HeloName:          "[192.168.1.23]",
		Sender:            "alice@example.org",
		Recipient:         "bob@example.net",
		ClientAddress:     "192.0.2.17",
		ClientName:        "mua17.example.org",
		ReverseClientName: "mua17.example.org",
		Instance:          "1a2b.6553a0f1.7d2b4.0",
		SASLMethod:        "PLAIN",
		SASLUsername:      "alice",
		Size:              5123,
		Stage:             StagePolicy,
	}
	wantEOM = policy.Request{
		ProtocolState:     policy.StateEndOfMessage,
		ProtocolName:      "ESMTP",
		HeloName:          "[192.168.1.23]",
		QueueID:           "4D6F2C1A8E",
		Sender:            "alice@example.org",
		RecipientCount:    3,
		ClientAddress:     "192.0.2.17",
		ClientName:        "mua17.example.org",
		ReverseClientName: "mua17.example.org",
		Instance:          "1a2b.6553a0f1.7d2b4.0",
		SASLMethod:        "PLAIN",
		SASLUsername:      "alice",
		Size:              48213,
		Stage:             StagePolicy,
	}
	wantExim = policy.Request{
		ProtocolState: policy.StateRcpt,
		ProtocolName:  "ESMTP",
		HeloName:      "mx.example.com",
		Sender:        "news@example.com",
		Recipient:     "carol@example.org",
		ClientAddress: "203.0.113.9",
		ClientName:    "mx.example.com",
		Stage:         StagePolicy,
	}
)

// encodeRequest is the client side of the protocol, for tests: CRLF line
// ends, so that a value ending in "\r" survives the decoder's stripping of
// one "\r".
func encodeRequest(req *policy.Request) []byte {
	var b []byte
	attr := func(name, value string) {
		b = append(b, name...)
		b = append(b, '=')
		b = append(b, value...)
		b = append(b, "\r\n"...)
	}
	attr("request", RequestType)
	attr("protocol_state", req.ProtocolState)
	attr("protocol_name", req.ProtocolName)
	attr("helo_name", req.HeloName)
	attr("queue_id", req.QueueID)
	attr("sender", req.Sender)
	attr("recipient", req.Recipient)
	attr("recipient_count", strconv.Itoa(req.RecipientCount))
	attr("client_address", req.ClientAddress)
	attr("client_name", req.ClientName)
	attr("reverse_client_name", req.ReverseClientName)
	attr("instance", req.Instance)
	attr("sasl_method", req.SASLMethod)
	attr("sasl_username", req.SASLUsername)
	attr("sasl_sender", req.SASLSender)
	attr("size", strconv.FormatInt(req.Size, 10))
	return append(b, "\r\n"...)
}

func TestDecodeTranscripts(t *testing.T) {
	for _, tc := range []struct {
		file string
		want policy.Request
	}{
		{"rcpt.txt", wantRCPT},
		{"eom.txt", wantEOM},
		{"exim-readsocket.txt", wantExim},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := transcript(t, tc.file)
			var req policy.Request
			if err := readRequest(bufio.NewReader(bytes.NewReader(in)), &req); err != nil {
				t.Fatal(err)
			}
			if req != tc.want {
				t.Fatalf("got  %+v\nwant %+v", req, tc.want)
			}
			// Round trip through the client-side encoding.
			var again policy.Request
			if err := readRequest(bufio.NewReader(bytes.NewReader(encodeRequest(&req))), &again); err != nil {
				t.Fatal(err)
			}
			if again != req {
				t.Fatalf("round trip: got %+v\nwant %+v", again, req)
			}
		})
	}
}

// TestDecodeStream reads several requests from one stream, as on a
// persistent connection, with small reader buffers to exercise the
// reassembly of long lines.
func TestDecodeStream(t *testing.T) {
	rcpt, eom := transcript(t, "rcpt.txt"), transcript(t, "eom.txt")
	in := bytes.Join([][]byte{rcpt, rcpt, eom, rcpt}, nil)
	for _, size := range []int{16, 64, 4096} {
		dec := NewDecoder(bufio.NewReaderSize(bytes.NewReader(in), size))
		for i, want := range []policy.Request{wantRCPT, wantRCPT, wantEOM, wantRCPT} {
			var req policy.Request
			if err := dec.Decode(&req); err != nil {
				t.Fatalf("size %d request %d: %v", size, i, err)
			}
			if req != want {
				t.Fatalf("size %d request %d: got %+v", size, i, req)
			}
		}
		var req policy.Request
		if err := dec.Decode(&req); err != io.EOF {
			t.Fatalf("size %d: at end got %v, want io.EOF", size, err)
		}
	}
}

func TestDecodeDetails(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     policy.Request
	}{
		{"first value wins",
			"request=smtpd_access_policy\nsender=a@x\nsender=b@x\nsize=1\nsize=2\nrecipient_count=3\nrecipient_count=4\n\n",
			policy.Request{Sender: "a@x", Size: 1, RecipientCount: 3}},
		{"unknown attributes ignored",
			"request=smtpd_access_policy\nfuture_attr=whatever\nx=\nsasl_username=u\n\n",
			policy.Request{SASLUsername: "u"}},
		{"empty numbers are zero",
			"request=smtpd_access_policy\nsize=\nrecipient_count=\n\n",
			policy.Request{}},
		{"value with = and spaces",
			"request=smtpd_access_policy\nhelo_name= a=b \n\n",
			policy.Request{HeloName: " a=b "}},
		{"CRLF",
			"request=smtpd_access_policy\r\nsender=a@x\r\n\r\n",
			policy.Request{Sender: "a@x"}},
		{"only one CR stripped",
			"request=smtpd_access_policy\nsender=a@x\r\r\n\n",
			policy.Request{Sender: "a@x\r"}},
		{"EOF ends request",
			"request=smtpd_access_policy\nsender=a@x\n",
			policy.Request{Sender: "a@x"}},
		{"leading zeros",
			"request=smtpd_access_policy\nsize=0000012\n\n",
			policy.Request{Size: 12}},
		{"largest size",
			"request=smtpd_access_policy\nsize=9223372036854775799\n\n",
			policy.Request{Size: 9223372036854775799}},
		{"local_user (Exim's non-SMTP ACL)",
			"request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nlocal_user=1001\n\n",
			policy.Request{ProtocolState: "END-OF-MESSAGE", LocalUser: "1001"}},
		{"request attribute anywhere",
			"sender=a@x\nrequest=smtpd_access_policy\n\n",
			policy.Request{Sender: "a@x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := policy.Request{Recipient: "stale", RecipientCount: 9, Stage: "milter"}
			if err := readRequest(bufio.NewReader(strings.NewReader(tc.in)), &req); err != nil {
				t.Fatal(err)
			}
			tc.want.Stage = StagePolicy
			if req != tc.want {
				t.Fatalf("got  %+v\nwant %+v", req, tc.want)
			}
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	line := func(n int) string { return "helo_name=" + strings.Repeat("h", n-len("helo_name=")) + "\n" }
	attrs := func(n int) string {
		return "request=smtpd_access_policy\n" + strings.Repeat("x=y\n", n-1) + "\n"
	}
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"line at limit", "request=smtpd_access_policy\n" + line(MaxLineLen) + "\n", nil},
		{"line at limit CRLF", "request=smtpd_access_policy\n" + strings.TrimSuffix(line(MaxLineLen), "\n") + "\r\n\n", nil},
		{"line over limit", "request=smtpd_access_policy\n" + line(MaxLineLen+1) + "\n", ErrLineTooLong},
		{"huge line", "request=smtpd_access_policy\n" + line(10*MaxLineLen) + "\n", ErrLineTooLong},
		{"huge line without newline", "request=smtpd_access_policy\n" + strings.Repeat("h", 3*MaxLineLen), ErrLineTooLong},
		{"attributes at limit", attrs(MaxAttributes), nil},
		{"attributes over limit", attrs(MaxAttributes + 1), ErrTooManyAttributes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req policy.Request
			err := readRequest(bufio.NewReader(strings.NewReader(tc.in)), &req)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"empty input", "", io.EOF},
		{"partial line", "request=smtpd_access_policy", io.ErrUnexpectedEOF},
		{"partial second line", "request=smtpd_access_policy\nsender=a", io.ErrUnexpectedEOF},
		{"lone CR", "\r", io.ErrUnexpectedEOF},
		{"empty request", "\n", ErrMalformed},
		{"empty request CRLF", "\r\n", ErrMalformed},
		{"no equals", "request=smtpd_access_policy\nsender\n\n", ErrMalformed},
		{"empty name", "request=smtpd_access_policy\n=x\n\n", ErrMalformed},
		{"NUL in value", "request=smtpd_access_policy\nsender=a\x00b\n\n", ErrMalformed},
		{"NUL in ignored attribute", "request=smtpd_access_policy\nzz=\x00\n\n", ErrMalformed},
		{"size not numeric", "request=smtpd_access_policy\nsize=12a\n\n", ErrMalformed},
		{"size negative", "request=smtpd_access_policy\nsize=-1\n\n", ErrMalformed},
		{"size plus", "request=smtpd_access_policy\nsize=+1\n\n", ErrMalformed},
		{"size overflow", "request=smtpd_access_policy\nsize=99999999999999999999\n\n", ErrMalformed},
		{"size space", "request=smtpd_access_policy\nsize= 1\n\n", ErrMalformed},
		{"recipient_count not numeric", "request=smtpd_access_policy\nrecipient_count=x\n\n", ErrMalformed},
		{"recipient_count too big", "request=smtpd_access_policy\nrecipient_count=4294967296\n\n", ErrMalformed},
		{"other request type", "request=delivery_status\n\n", ErrUnknownRequest},
		{"request type case", "request=SMTPD_ACCESS_POLICY\n\n", ErrUnknownRequest},
		{"second request type", "request=smtpd_access_policy\nrequest=x\n\n", ErrUnknownRequest},
		{"no request attribute", "sender=a@x\n\n", ErrUnknownRequest},
		{"no request attribute at EOF", "sender=a@x\n", ErrUnknownRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req policy.Request
			err := readRequest(bufio.NewReader(strings.NewReader(tc.in)), &req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != io.EOF && err != io.ErrUnexpectedEOF && !strings.HasPrefix(err.Error(), "postfix: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// A Decoder that reuses the previous request's strings decodes every
// request of a stream exactly as a fresh Decoder would, whether its fields
// repeat, change, vanish or come back.
func TestDecodeReusesPreviousStrings(t *testing.T) {
	a := policy.Request{ProtocolState: policy.StateRcpt, ProtocolName: "ESMTP", HeloName: "mx.example.org",
		Sender: "alice@example.org", Recipient: "bob@example.net", RecipientCount: 0, ClientAddress: "192.0.2.7",
		ClientName: "mx.example.org", Instance: "1a2b.3c4d.0", SASLMethod: "PLAIN", SASLUsername: "alice", Stage: StagePolicy}
	b := a
	b.Recipient = "carol@example.net" // a second RCPT
	c := b
	c.ProtocolState, c.QueueID, c.Recipient, c.RecipientCount, c.Size = policy.StateEndOfMessage, "4F3A2B1C", "", 2, 1234
	d := a
	d.Instance, d.Sender, d.SASLUsername, d.SASLMethod = "1a2b.3c4d.1", "", "", "" // next message, not authenticated
	e := d
	e.Sender, e.HeloName = "ALICE@example.org", "mx.example.org" // a value back, another case
	seq := []policy.Request{a, b, c, d, e, e, a, {ProtocolState: policy.StateRcpt, Stage: StagePolicy}, a}
	var in []byte
	for i := range seq {
		if seq[i].Instance == "" { // attributes absent, not empty
			in = append(in, "request=smtpd_access_policy\nprotocol_state=RCPT\n\n"...)
			continue
		}
		in = append(in, encodeRequest(&seq[i])...)
	}
	dec := NewDecoder(bufio.NewReaderSize(bytes.NewReader(in), 16))
	for i, want := range seq {
		var got policy.Request
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("request %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// TestDecodeAllocs pins the allocation budget of the hot path: none for a
// request whose strings repeat the previous request's, at most one per
// request, once the Decoder's buffers have grown.
func TestDecodeAllocs(t *testing.T) {
	in := transcript(t, "rcpt.txt")
	r := bytes.NewReader(in)
	br := bufio.NewReader(r)
	dec := NewDecoder(br)
	var req policy.Request
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(in)
		br.Reset(r)
		if err := dec.Decode(&req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Decode of a repeated request: %v allocations, want 0", allocs)
	}
	other := transcript(t, "eom.txt")
	n := 0
	alternate := func() {
		n++
		cur := in
		if n%2 == 0 {
			cur = other
		}
		r.Reset(cur)
		br.Reset(r)
		if err := dec.Decode(&req); err != nil {
			t.Fatal(err)
		}
	}
	// Alternating requests change several values each time; their strings
	// are cut from the Decoder's blocks, one allocation per block. The
	// blocks grow from 1 to 16 KiB over the first requests: warm up first.
	for range 500 {
		alternate()
	}
	allocs = testing.AllocsPerRun(200, alternate)
	if allocs > 0.05 {
		t.Fatalf("Decode: %v allocations per request, want at most 0.05 (one per arena block)", allocs)
	}
}

// TestDecoderStringsStayImmutable decodes thousands of requests with
// different values through one Decoder (many arena blocks) and checks that
// the strings of every earlier request still hold their own values: carve
// never writes where a returned string points.
func TestDecoderStringsStayImmutable(t *testing.T) {
	var in bytes.Buffer
	const n = 3000
	for i := range n {
		fmt.Fprintf(&in, "request=smtpd_access_policy\nprotocol_state=RCPT\nsender=s%d@example.org\n"+
			"recipient=r%d@example.net\ninstance=%x.%d\nqueue_id=Q%d\n\n", i, i, i, i, i)
	}
	dec := NewDecoder(bufio.NewReader(&in))
	reqs := make([]policy.Request, n)
	for i := range reqs {
		if err := dec.Decode(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range reqs {
		if r.Sender != fmt.Sprintf("s%d@example.org", i) || r.Recipient != fmt.Sprintf("r%d@example.net", i) ||
			r.Instance != fmt.Sprintf("%x.%d", i, i) || r.QueueID != fmt.Sprintf("Q%d", i) {
			t.Fatalf("request %d changed after later decodes: %+v", i, r)
		}
	}
}

// TestDecoderOneRequestSmallBlock checks that a Decoder used for one
// request (Exim's ${readsocket} opens a connection per request) allocates
// a small block for its strings, not the 16 KiB of a busy connection.
func TestDecoderOneRequestSmallBlock(t *testing.T) {
	in := transcript(t, "rcpt.txt")
	r := bytes.NewReader(in)
	br := bufio.NewReader(r)
	var req policy.Request
	var before, after runtime.MemStats
	const n = 200
	runtime.ReadMemStats(&before)
	for range n {
		r.Reset(in)
		br.Reset(r)
		if err := NewDecoder(br).Decode(&req); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 4<<10 {
		t.Fatalf("one request through a new Decoder allocates %d bytes, want at most 4 KiB", per)
	}
}
