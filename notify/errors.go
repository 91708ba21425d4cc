package notify

import "errors"

// ErrClosed is returned by Close when called twice; Notify on a closed
// Notifier drops the event and returns false.
var ErrClosed = errors.New("notify: closed")

// ErrStatus is wrapped by the webhook error for a status other than 2xx.
var ErrStatus = errors.New("notify: webhook answered")
