package quarantine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nestedMessage returns a message whose multipart parts are nested depth
// levels deep, the innermost holding one text part (about 70 bytes a
// level, as a hostile sender would build it).
func nestedMessage(depth int) []byte {
	var b strings.Builder
	b.WriteString("From: a@example.org\r\nSubject: nest\r\nMIME-Version: 1.0\r\n")
	for i := range depth {
		fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=\"b%d\"\r\n\r\n--b%d\r\n", i, i)
	}
	b.WriteString("Content-Type: text/plain\r\n\r\ninnermost text\r\n")
	for i := depth - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "--b%d--\r\n", i)
	}
	return []byte(b.String())
}

// TestPreviewStopsAtMIMENestingLimit: a message nested 5,000 levels deep
// is listed down to MaxMIMENesting levels, the deepest flagged, and the
// preview stays small (it listed every level, each with its full path
// and indentation, 50 MB for 5,000 levels).
func TestPreviewStopsAtMIMENestingLimit(t *testing.T) {
	msg := nestedMessage(5000)
	p, err := PreviewMessage(context.Background(), msg, 0)
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	if len(p.Parts) != MaxMIMENesting+1 {
		t.Fatalf("%d parts listed, want %d", len(p.Parts), MaxMIMENesting+1)
	}
	last := p.Parts[len(p.Parts)-1]
	if last.Depth != MaxMIMENesting || !strings.Contains(last.Err, "mime_nesting_limit") {
		t.Fatalf("deepest part %+v, want depth %d flagged with the nesting limit", last, MaxMIMENesting)
	}
	if out := p.String(); len(out) > 64<<10 {
		t.Fatalf("preview is %d bytes for a %d-byte message", len(out), len(msg))
	}
	// Within the limit everything is parsed, the text found.
	p, err = PreviewMessage(context.Background(), nestedMessage(50), 0)
	if err != nil || len(p.Parts) != 51 || !strings.Contains(p.Text, "innermost text") {
		t.Fatalf("50 levels: %d parts, text %q, err %v", len(p.Parts), p.Text, err)
	}
}

// TestPreviewManyPartsIsBounded: a message of 3,000 sibling parts lists
// the first 1,000 and says the rest were left out.
func TestPreviewManyPartsIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("Content-Type: multipart/mixed; boundary=x\r\n\r\n")
	for range 3000 {
		b.WriteString("--x\r\nContent-Type: text/plain\r\n\r\nhi\r\n")
	}
	b.WriteString("--x--\r\n")
	p, err := PreviewMessage(context.Background(), []byte(b.String()), 0)
	if err != nil || len(p.Parts) != maxPreviewParts || !p.PartsOmitted || !strings.Contains(p.String(), "the rest not listed") {
		t.Fatalf("%d parts, omitted %v, err %v", len(p.Parts), p.PartsOmitted, err)
	}
}

// TestPreviewStopsWhenCancelled: the operator's request went away.
func TestPreviewStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := PreviewMessage(ctx, nestedMessage(10), 0)
	if !errors.Is(err, context.Canceled) || p == nil || len(p.Parts) != 0 {
		t.Fatalf("cancelled preview: %d parts, err %v", len(p.Parts), err)
	}
}
