//go:build integration

package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestIntegrationPostfixReplyText: the reply a client gets from a real
// Postfix when the policy service defers at RCPT is the one README.md and
// docs/postfix.md quote: Postfix puts "<RECIPIENT>: Recipient address
// rejected: " before the daemon's text.
func TestIntegrationPostfixReplyText(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 1
period = "1h"
message = "too much mail from {key}: {rate} messages per {period} (limit {limit}); try again in {retry}"
`)
	startTestDaemon(t, cfgPath)
	if err := sendAs(t, pf, "alice", 1); err != nil {
		t.Fatal(err)
	}
	err := sendAs(t, pf, "alice", 2)
	var se *smtp.SMTPError
	if !errors.As(err, &se) {
		t.Fatalf("second message: %v, want a 450", err)
	}
	want := "<rcpt@example.net>: Recipient address rejected: too much mail from alice: 2.0 messages per 1h (limit 1); try again in "
	if se.Code != 450 || se.EnhancedCode != (smtp.EnhancedCode{4, 7, 1}) || !strings.HasPrefix(se.Message, want) {
		t.Fatalf("reply %d %v %q, want 450 4.7.1 %q...", se.Code, se.EnhancedCode, se.Message, want)
	}
	t.Logf("Postfix answered: %d %d.%d.%d %s", se.Code, se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2], se.Message)
}
