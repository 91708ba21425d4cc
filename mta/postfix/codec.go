package postfix

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Limits on a request (Postfix's are about 30 lines, under 1 KiB).
const (
	MaxLineLen    = 64 << 10 // bytes of a line, without "\n"
	MaxAttributes = 1024     // attribute lines of one request
)

const (
	RequestType = "smtpd_access_policy" // the only request attribute value answered
	StagePolicy = "policy"              // the policy.Request.Stage set by Decode
)

// Indexes of the string attributes Decode keeps.
const (
	fProtocolState = iota
	fProtocolName
	fHeloName
	fQueueID
	fSender
	fRecipient
	fClientAddress
	fClientName
	fReverseClientName
	fInstance
	fSASLMethod
	fSASLUsername
	fSASLSender
	fLocalUser
	nStringFields
)

// Bits in Decoder.seen for the numeric attributes.
const (
	seenRecipientCount = 1 << (nStringFields + iota)
	seenSize
)

// span locates one value in Decoder.vals.
type span struct{ off, n int32 }

// A Decoder reads policy requests from a buffered reader, one per
// connection; not safe for concurrent use. Strings equal to the previous
// request's are reused, others cut from append-only blocks of up to
// 16 KiB; a consumer keeping one for long should strings.Clone it.
type Decoder struct {
	r     *bufio.Reader
	long  []byte // reassembly of a line longer than r's buffer
	vals  []byte // values of the current request's known attributes
	fresh []byte // the values not found in prev
	arena []byte // carve's block; bytes up to len handed out, never rewritten
	spans [nStringFields]span
	seen  uint32
	prev  [nStringFields]string // the previous request's strings
}

// NewDecoder returns a Decoder reading from r; lines up to MaxLineLen
// longer than r's buffer are reassembled.
func NewDecoder(r *bufio.Reader) *Decoder {
	return &Decoder{r: r}
}

// Decode reads the next request into req, overwriting every field:
// name=value lines ("\r\n" accepted) ended by an empty line, or by EOF
// after a whole line (Exim readsocket). Unknown attributes are ignored, a
// repeated one keeps its first value, empty numbers are 0. Errors:
// errors.go; after one, close the connection.
func (d *Decoder) Decode(req *policy.Request) error {
	// Do not keep an exceptionally large request's memory.
	if cap(d.vals) > decoderKeep {
		d.vals = nil
	}
	if cap(d.long) > decoderKeep {
		d.long = nil
	}
	d.vals = d.vals[:0]
	d.seen = 0
	rcptCount, size, err := d.readAttributes()
	if err != nil {
		return err
	}
	*req = policy.Request{
		RecipientCount: int(rcptCount),
		Size:           size,
		Stage:          StagePolicy,
	}
	d.internValues()
	for f, dst := range [nStringFields]*string{&req.ProtocolState, &req.ProtocolName, &req.HeloName, &req.QueueID, &req.Sender,
		&req.Recipient, &req.ClientAddress, &req.ClientName, &req.ReverseClientName, &req.Instance, &req.SASLMethod,
		&req.SASLUsername, &req.SASLSender, &req.LocalUser} {
		*dst = d.prev[f]
	}
	return nil
}

// decoderKeep is the largest buffer a Decoder keeps for its next request.
const decoderKeep = 16 << 10

// readAttributes reads one request's lines into d.vals and d.spans and
// returns its recipient_count and size; errors are Decode's.
func (d *Decoder) readAttributes() (rcptCount, size int64, err error) {
	nattr := 0
	sawRequest := false
	for {
		line, err := d.readLine()
		if err != nil {
			if err == io.EOF {
				if nattr == 0 {
					return 0, 0, io.EOF
				}
				break // Exim readsocket: end of input ends the request.
			}
			return 0, 0, err
		}
		if len(line) == 0 {
			if nattr == 0 {
				return 0, 0, fmt.Errorf("%w: empty request", ErrMalformed)
			}
			break
		}
		nattr++
		if nattr > MaxAttributes {
			return 0, 0, fmt.Errorf("%w: more than %d", ErrTooManyAttributes, MaxAttributes)
		}
		eq := bytes.IndexByte(line, '=')
		if eq < 0 {
			return 0, 0, fmt.Errorf("%w: line %d: no '=' in %.40q", ErrMalformed, nattr, line)
		}
		if eq == 0 {
			return 0, 0, fmt.Errorf("%w: line %d: empty attribute name", ErrMalformed, nattr)
		}
		if bytes.IndexByte(line, 0) >= 0 {
			return 0, 0, fmt.Errorf("%w: line %d: NUL byte", ErrMalformed, nattr)
		}
		name, value := line[:eq], line[eq+1:]
		switch string(name) {
		case "request":
			if string(value) != RequestType {
				return 0, 0, fmt.Errorf("%w: %.40q", ErrUnknownRequest, value)
			}
			sawRequest = true
		case "recipient_count":
			n, ok := parseUint(value)
			if !ok || n > math.MaxInt32 {
				return 0, 0, fmt.Errorf("%w: line %d: recipient_count %.40q", ErrMalformed, nattr, value)
			}
			if d.seen&seenRecipientCount == 0 {
				d.seen |= seenRecipientCount
				rcptCount = n
			}
		case "size":
			n, ok := parseUint(value)
			if !ok {
				return 0, 0, fmt.Errorf("%w: line %d: size %.40q", ErrMalformed, nattr, value)
			}
			if d.seen&seenSize == 0 {
				d.seen |= seenSize
				size = n
			}
		default:
			if f := stringField(name); f >= 0 && d.seen&(1<<f) == 0 { // keep the first value
				d.seen |= 1 << f
				d.spans[f] = span{int32(len(d.vals)), int32(len(value))}
				d.vals = append(d.vals, value...)
			}
		}
	}
	if !sawRequest {
		return 0, 0, fmt.Errorf("%w: no request attribute", ErrUnknownRequest)
	}
	return rcptCount, size, nil
}

// stringField returns the string field of attribute name, or -1.
func stringField(name []byte) int {
	switch string(name) {
	case "protocol_state":
		return fProtocolState
	case "protocol_name":
		return fProtocolName
	case "helo_name":
		return fHeloName
	case "queue_id":
		return fQueueID
	case "sender":
		return fSender
	case "recipient":
		return fRecipient
	case "client_address":
		return fClientAddress
	case "client_name":
		return fClientName
	case "reverse_client_name":
		return fReverseClientName
	case "instance":
		return fInstance
	case "sasl_method":
		return fSASLMethod
	case "sasl_username":
		return fSASLUsername
	case "sasl_sender":
		return fSASLSender
	case "local_user":
		return fLocalUser
	}
	return -1
}

// internValues sets d.prev to the request's strings: the previous ones
// where equal, the others cut from one new string.
func (d *Decoder) internValues() {
	var changed uint32
	d.fresh = d.fresh[:0]
	for f := range nStringFields {
		if d.seen&(1<<f) == 0 {
			continue
		}
		sp := d.spans[f]
		v := d.vals[sp.off : sp.off+sp.n]
		if string(v) == d.prev[f] {
			continue
		}
		if c, ok := constant(f, v); ok {
			d.prev[f] = c
			continue
		}
		changed |= 1 << f
		d.spans[f].off = int32(len(d.fresh))
		d.fresh = append(d.fresh, v...)
	}
	s := d.carve(d.fresh)
	if cap(d.fresh) > decoderKeep {
		d.fresh = nil
	}
	for f := range nStringFields {
		switch {
		case d.seen&(1<<f) == 0:
			d.prev[f] = ""
		case changed&(1<<f) != 0:
			sp := d.spans[f]
			d.prev[f] = s[sp.off : sp.off+sp.n]
		}
	}
}

// Sizes of carve's blocks: the first arenaMin, each next twice the last.
const (
	arenaMin  = 1 << 10
	arenaSize = 16 << 10
)

// carve returns a copy of b cut from the current append-only block: an
// immutable string that pins its block.
func (d *Decoder) carve(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > cap(d.arena)-len(d.arena) {
		if len(b) > arenaSize/4 {
			return string(b) // a large value gets a block of its own
		}
		size := min(max(2*cap(d.arena), arenaMin), arenaSize)
		if size < len(b) {
			size = arenaSize // len(b) <= arenaSize/4
		}
		d.arena = make([]byte, 0, size)
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	return unsafe.String(&d.arena[start], len(b))
}

// knownStates are the protocol_state values decoded without allocating.
var knownStates = [...]string{policy.StateConnect, policy.StateEHLO, policy.StateHELO, policy.StateMail,
	policy.StateRcpt, policy.StateData, policy.StateEndOfMessage, policy.StateVrfy, policy.StateEtrn}

// constant returns a constant string equal to v for field f, if any.
func constant(f int, v []byte) (string, bool) {
	if len(v) == 0 {
		return "", true
	}
	switch f {
	case fProtocolState:
		for _, s := range knownStates {
			if string(v) == s {
				return s, true
			}
		}
	case fProtocolName:
		switch string(v) {
		case "ESMTP":
			return "ESMTP", true
		case "SMTP":
			return "SMTP", true
		}
	}
	return "", false
}

// readLine returns the next line without "\n" or "\r\n", valid until the
// next call; io.EOF at a clean end, io.ErrUnexpectedEOF inside a line.
func (d *Decoder) readLine() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// Longer than the reader's buffer: reassemble, within the limit.
		d.long = append(d.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(d.long) > MaxLineLen+2 {
				return nil, fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, MaxLineLen)
			}
			line, err = d.r.ReadSlice('\n')
			d.long = append(d.long, line...)
		}
		line = d.long
	}
	if err != nil {
		if err == io.EOF {
			if len(line) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > MaxLineLen {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, MaxLineLen)
	}
	return line, nil
}

// parseUint parses an unsigned decimal integer without allocating. The empty
// string is 0 (SMTPD_POLICY_README: an unavailable value may be sent empty).
func parseUint(b []byte) (int64, bool) {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
