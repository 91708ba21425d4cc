package milter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	gomilter "github.com/emersion/go-milter"
)

func newListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, v := range s {
		out = append(out, netip.MustParsePrefix(v))
	}
	return out
}

// packet frames payload as the milter protocol does.
func packet(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

// optneg is the MTA's SMFIC_OPTNEG: version 6, actions, protocol 0.
func optneg(actions gomilter.OptAction) []byte {
	p := []byte{'O'}
	p = binary.BigEndian.AppendUint32(p, 6)
	p = binary.BigEndian.AppendUint32(p, uint32(actions))
	p = binary.BigEndian.AppendUint32(p, 0)
	return packet(p)
}

// TestGuardBadPackets sends a zero-length packet, and a packet announcing
// more than MaxPacketSize, to the real server, before and after the option
// negotiation. Each connection is closed without a reply, and the server
// keeps serving a concurrent session and new ones.
func TestGuardBadPackets(t *testing.T) {
	env := start(t, "tcp", &Server{})
	// A session that stays open across the attacks.
	survivor := env.session(t)
	connect(t, survivor)
	cont(t, "mail")(survivor.Mail("a@example.com", nil))

	for _, tc := range []struct {
		name   string
		before []byte // sent first; a reply to it is read
		bad    []byte
		reason string
	}{
		{"zero-first", nil, []byte{0, 0, 0, 0}, ReasonEmptyPacket},
		{"zero-after-optneg", optneg(clientActions), []byte{0, 0, 0, 0}, ReasonEmptyPacket},
		{"too-large", nil, binary.BigEndian.AppendUint32(nil, MaxPacketSize+1), ReasonPacketTooLarge},
		{"huge", optneg(clientActions), []byte{0xff, 0xff, 0xff, 0xff}, ReasonPacketTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.metrics.get(func(m *countMetrics) int { return m.bad[tc.reason] })
			c := env.rawConn(t)
			if tc.before != nil {
				if _, err := c.Write(tc.before); err != nil {
					t.Fatal(err)
				}
				var hdr [4]byte
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					t.Fatalf("no OPTNEG reply: %v", err)
				}
				if _, err := io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(hdr[:]))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Write(tc.bad); err != nil {
				t.Fatal(err)
			}
			readsEOF(t, c)
			waitFor(t, "bad input counted", func() bool {
				return env.metrics.get(func(m *countMetrics) int { return m.bad[tc.reason] }) == before+1
			})
		})
	}

	// The concurrent session is unaffected...
	cont(t, "rcpt")(survivor.Rcpt("bob@example.org", nil))
	cont(t, "eoh")(survivor.HeaderEnd())
	if _, act, err := survivor.End(); err != nil || act.Code != gomilter.ActAccept {
		t.Fatalf("survivor: %v %v", act, err)
	}
	// ...and new connections are served.
	s := env.session(t)
	connect(t, s)
	if _, _, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q"); act.Code != gomilter.ActAccept {
		t.Fatalf("new session: %q", act.Code)
	}
}

// TestLibraryZeroLengthPacket documents how the go-milter version in go.mod
// handles a zero-length packet by itself, without our guard: it is read
// with the library's own packet reader (through its client, which shares
// readPacket with the server side) under recover. go-milter before v0.5.0
// allocated data := make([]byte, 0) and took data[0]: "index out of range
// [0] with length 0", a panic that, in a server goroutine without recover,
// killed the process. v0.5.0 returns "milter: invalid zero-length packet"
// and its session goroutine also recovers. The guard makes our server
// independent of either behaviour: the library never sees such a packet.
func TestLibraryZeroLengthPacket(t *testing.T) {
	l := newListener(t)
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.ReadFull(c, make([]byte, 4+13)) // the client's OPTNEG
		c.Write([]byte{0, 0, 0, 0})        // a zero-length "reply"
		time.Sleep(time.Second)
	}()
	var err error
	panicked := func() (p any) {
		defer func() { p = recover() }()
		_, err = gomilter.NewClientWithOptions("tcp", l.Addr().String(), gomilter.ClientOptions{
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		}).Session()
		return nil
	}()
	switch {
	case panicked != nil:
		t.Logf("go-milter panics on a zero-length packet (%v): the guard is what protects the server", panicked)
	case err == nil || !strings.Contains(err.Error(), "zero-length"):
		t.Fatalf("go-milter accepted a zero-length packet: err %v", err)
	default:
		t.Logf("go-milter refuses a zero-length packet itself: %v", err)
	}
}

// TestFrameReader checks the guard's pass-through and its refusals with
// one-byte and whole reads.
func TestFrameReader(t *testing.T) {
	good := append(packet([]byte("Ohello")), packet([]byte("B"))...)
	good = append(good, packet(bytes.Repeat([]byte("x"), 1000))...)
	for _, tc := range []struct {
		name  string
		in    []byte
		want  []byte
		error error
	}{
		{"good", good, good, io.EOF},
		{"empty-stream", nil, nil, io.EOF},
		{"zero", append(packet([]byte("A")), 0, 0, 0, 0, 1, 'B'), packet([]byte("A")), ErrEmptyPacket},
		{"large", append(packet([]byte("A")), binary.BigEndian.AppendUint32(nil, 65)...), packet([]byte("A")), ErrPacketTooLarge},
		{"truncated-header", append(packet([]byte("A")), 0, 0), packet([]byte("A")), io.ErrUnexpectedEOF},
		{"truncated-payload", []byte{0, 0, 0, 5, 'B', 'x'}, []byte{0, 0, 0, 5, 'B', 'x'}, io.ErrUnexpectedEOF},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(tc.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			max := uint32(1 << 20)
			if tc.name == "large" {
				max = 64
			}
			got, err := io.ReadAll(newFrameReader(r, max, nil))
			if tc.error == io.EOF {
				if err != nil {
					t.Errorf("%s/%v: %v", tc.name, oneByte, err)
				}
			} else if !errors.Is(err, tc.error) {
				t.Errorf("%s/%v: error %v, want %v", tc.name, oneByte, err, tc.error)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s/%v: passed %q, want %q", tc.name, oneByte, got, tc.want)
			}
		}
	}
}

func TestReplyAndHeader(t *testing.T) {
	for _, tc := range []struct{ h, name, value string }{
		{"X-A: b", "X-A", "b"},
		{"X-A:b", "X-A", "b"},
		{"X-A:\t b\r\nInjected: x", "X-A", "b Injected: x"},
		{"X-A:", "X-A", ""},
	} {
		name, value, ok := splitHeader(tc.h)
		if !ok || name != tc.name || value != tc.value {
			t.Errorf("splitHeader(%q) = %q %q %v", tc.h, name, value, ok)
		}
	}
	for _, h := range []string{"", ": x", "No colon", "Bad Name: x", "X\x00: y"} {
		if _, _, ok := splitHeader(h); ok {
			t.Errorf("splitHeader(%q) accepted", h)
		}
	}
	msg := reply(450, "4.7.1", strings.Repeat("é", 400)).Response()
	if msg.Code != 'y' || len(msg.Data) > 520 || msg.Data[len(msg.Data)-1] != 0 {
		t.Errorf("long reply: %d bytes", len(msg.Data))
	}
}
