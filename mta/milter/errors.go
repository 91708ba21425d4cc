package milter

import "errors"

// Errors of the milter front end; test them with errors.Is.
var (
	ErrServerClosed    = errors.New("milter: server closed")                   // Serve after Shutdown or Close; Shutdown/Close again
	ErrNoDecider       = errors.New("milter: server has no Decider")           // Serve
	ErrEmptyPacket     = errors.New("milter: zero-length packet")              // connection closed without a reply
	ErrPacketTooLarge  = errors.New("milter: packet too large")                // above MaxPacketSize; closed unread
	ErrMessageTooLarge = errors.New("milter: message too large to quarantine") // freeze beyond MaxMessageSize: 452 4.3.4
	ErrNoQuarantine    = errors.New("milter: no quarantine configured")        // freeze without Quarantine: 451 4.3.0
	ErrNotKept         = errors.New("milter: message not kept for freezing")   // FreezeAdvisor said no: 451 4.3.0
	errSessionPoisoned = errors.New("milter: session closed after a panic")    // after the temp-fail reply
)
