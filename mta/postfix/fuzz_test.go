package postfix

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
)

// FuzzReadRequest feeds arbitrary input to the Decoder: it must never
// panic, return only the documented errors, and whatever it accepts must
// survive a round trip through the client-side encoding unchanged. Each
// decoded request's reply must be a valid reply line too.
func FuzzReadRequest(f *testing.F) {
	for _, name := range []string{"rcpt.txt", "eom.txt", "exim-readsocket.txt"} {
		f.Add(transcript(f, name))
	}
	f.Add(append(transcript(f, "rcpt.txt"), transcript(f, "eom.txt")...))
	for _, s := range []string{
		"",
		"\n",
		"\r\n\r\n",
		"request=smtpd_access_policy\n\n",
		"request=smtpd_access_policy\nsize=\nrecipient_count=007\n\n",
		"request=smtpd_access_policy\nsender=a\r\r\n\n",
		"request=smtpd_access_policy\nsize=99999999999999999999\n\n",
		"request=other\n\n",
		"sender=x\n",
		"=\n\n",
		"request=smtpd_access_policy\nsender=a\x00\n\n",
		"request=smtpd_access_policy\nsasl_username=\xff\xfe\n",
		"request=smtpd_access_policy\nhelo_name=" + strings.Repeat("h", 5000) + "\n\n",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, in []byte) {
		// A small reader buffer exercises the long-line reassembly.
		dec := NewDecoder(bufio.NewReaderSize(bytes.NewReader(in), 16))
		// fresh decodes the same stream without reusing the previous
		// request's strings: the reuse must not change a request.
		fresh := NewDecoder(bufio.NewReaderSize(bytes.NewReader(in), 16))
		// kept are the decoded requests and saved deep copies of them:
		// later decodes must not change an earlier request's strings.
		var kept, saved []policy.Request
		defer func() {
			for i := range kept {
				if kept[i] != saved[i] {
					t.Fatalf("request %d changed by later decodes:\n got %+v\nwant %+v", i, kept[i], saved[i])
				}
			}
		}()
		for range 4 {
			var req, want policy.Request
			err := dec.Decode(&req)
			fresh.prev = [nStringFields]string{}
			if ferr := fresh.Decode(&want); (ferr == nil) != (err == nil) || (err == nil && req != want) {
				t.Fatalf("with reuse %+v (%v), without %+v (%v)", req, err, want, ferr)
			}
			if err != nil {
				if !documented(err) {
					t.Fatalf("undocumented error %T: %v", err, err)
				}
				return
			}
			if req.Stage != StagePolicy || req.RecipientCount < 0 || req.Size < 0 {
				t.Fatalf("bad request %+v", req)
			}
			kept = append(kept, req)
			saved = append(saved, cloneRequest(req))
			var again policy.Request
			if err := readRequest(bufio.NewReader(bytes.NewReader(encodeRequest(&req))), &again); err != nil {
				t.Fatalf("re-encoded %+v does not decode: %v", req, err)
			}
			if again != req {
				t.Fatalf("round trip changed the request:\n got %+v\nwant %+v", again, req)
			}
			for _, a := range []policy.Action{policy.Pass, policy.Warn, policy.Hold, policy.Defer, policy.Reject} {
				checkReply(t, reply(policy.Decision{Action: a, Text: req.Sender, Header: req.HeloName}, req.ProtocolState))
			}
		}
	})
}

// documented reports whether err is one Decode is documented to return for
// input from a bytes.Reader.
func documented(err error) bool {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return true
	}
	for _, e := range []error{ErrLineTooLong, ErrTooManyAttributes, ErrMalformed, ErrUnknownRequest} {
		if errors.Is(err, e) && strings.HasPrefix(err.Error(), "postfix: ") {
			return true
		}
	}
	return false
}

// cloneRequest returns r with every string copied.
func cloneRequest(r policy.Request) policy.Request {
	c := strings.Clone
	r.ProtocolState, r.ProtocolName, r.HeloName, r.QueueID = c(r.ProtocolState), c(r.ProtocolName), c(r.HeloName), c(r.QueueID)
	r.Sender, r.Recipient, r.ClientAddress, r.ClientName = c(r.Sender), c(r.Recipient), c(r.ClientAddress), c(r.ClientName)
	r.ReverseClientName, r.Instance, r.SASLMethod = c(r.ReverseClientName), c(r.Instance), c(r.SASLMethod)
	r.SASLUsername, r.SASLSender, r.Stage = c(r.SASLUsername), c(r.SASLSender), c(r.Stage)
	return r
}
