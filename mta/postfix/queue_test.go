package postfix

import (
	"context"
	"testing"
)

// TestQueueRefusesInvalidQueueID: a queue ID not in Postfix's or Exim's
// syntax is never substituted into a command.
func TestQueueRefusesInvalidQueueID(t *testing.T) {
	q := &Queue{DeleteCommand: []string{"false", "{queue_id}"}}
	if _, err := q.run(context.Background(), []string{"echo", "{queue_id}"}, "ALL"); err == nil {
		t.Fatal("run substituted ALL")
	}
}
