package milter

import "errors"

// Errors of the milter front end. Test them with errors.Is; some are
// wrapped with detail.
var (
	// ErrServerClosed is returned by Server.Serve after Shutdown or Close,
	// and by Shutdown and Close when the server was already closed.
	ErrServerClosed = errors.New("milter: server closed")
	// ErrNoDecider is returned by Server.Serve when Server.Decider is nil.
	ErrNoDecider = errors.New("milter: server has no Decider")
	// ErrEmptyPacket ends a connection whose MTA sent a packet of length
	// zero (no command byte). The connection is closed without a reply.
	ErrEmptyPacket = errors.New("milter: zero-length packet")
	// ErrPacketTooLarge ends a connection whose MTA announced a packet
	// longer than MaxPacketSize; it is wrapped with the length. The
	// connection is closed without a reply, before the payload is read.
	ErrPacketTooLarge = errors.New("milter: packet too large")
	// ErrMessageTooLarge is logged when a message that must be frozen is
	// larger than Server.MaxMessageSize; the message is temp-failed
	// (452 4.3.4).
	ErrMessageTooLarge = errors.New("milter: message too large to quarantine")
	// ErrNoQuarantine is logged when a message must be frozen but
	// Server.Quarantine is nil; the message is temp-failed (451 4.3.0).
	ErrNoQuarantine = errors.New("milter: no quarantine configured")
	// ErrNotKept is logged when a message must be frozen but was not kept
	// because the Decider's FreezeAdvisor said, when the message began, that
	// no freeze could apply (a reload in between, or an advisor that was
	// wrong); the message is temp-failed (451 4.3.0), never discarded.
	ErrNotKept = errors.New("milter: message not kept for freezing")
	// errSessionPoisoned ends a session after a recovered panic, once its
	// temp-fail reply has been written.
	errSessionPoisoned = errors.New("milter: session closed after a panic")
)
