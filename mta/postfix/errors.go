package postfix

import "errors"

// Errors returned by the codec (Decoder.Decode, ReadRequest), the server and
// the listen helpers. Codec errors are wrapped with detail (line number,
// attribute name) using %w; test them with errors.Is. Besides these, Decode
// returns io.EOF for a clean end of input before the first byte of a request,
// io.ErrUnexpectedEOF for input that ends inside a line, and the reader's own
// error (for example a deadline exceeded) unchanged.
var (
	// ErrLineTooLong is returned by Decode for a request line longer than
	// MaxLineLen bytes (not counting the line terminator).
	ErrLineTooLong = errors.New("postfix: request line too long")
	// ErrTooManyAttributes is returned by Decode for a request of more than
	// MaxAttributes attribute lines.
	ErrTooManyAttributes = errors.New("postfix: too many attributes in request")
	// ErrMalformed is returned by Decode for a line without "=", an empty
	// attribute name, a NUL byte, an empty request (a lone empty line), or a
	// recipient_count or size that is not a non-negative decimal integer.
	ErrMalformed = errors.New("postfix: malformed request")
	// ErrUnknownRequest is returned by Decode for a request whose request
	// attribute is missing or is not "smtpd_access_policy".
	ErrUnknownRequest = errors.New("postfix: unknown request type")
	// ErrServerClosed is returned by Server.Serve after Shutdown or Close,
	// and by Shutdown and Close when the server was already closed.
	ErrServerClosed = errors.New("postfix: server closed")
	// ErrNoDecider is returned by Server.Serve when Server.Decider is nil.
	ErrNoDecider = errors.New("postfix: server has no Decider")
	// ErrSocketInUse is returned by ListenUnix when a live server already
	// accepts connections on the socket path.
	ErrSocketInUse = errors.New("postfix: socket in use")
	// ErrNotSocket is returned by ListenUnix when the path exists and is not
	// a unix socket; ListenUnix never removes such a file.
	ErrNotSocket = errors.New("postfix: path exists and is not a socket")
)
