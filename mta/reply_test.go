package mta

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidEnhanced(t *testing.T) {
	for s, want := range map[string]bool{
		"4.7.1": true, "4.7.28": true, "4.999.999": true, "4.0.0": true,
		"": false, "4": false, "4.7": false, "4.7.": false, "4..1": false, "4.7.1.": false,
		"4.1000.1": false, "5.7.1": false, "4.7.1 ": false, "4,7.1": false, "x.7.1": false,
	} {
		if got := ValidEnhanced(s, '4'); got != want {
			t.Errorf("ValidEnhanced(%q) = %v, want %v", s, got, want)
		}
	}
	if !ValidEnhanced("5.7.1", '5') || ValidEnhanced("4.7.1", '5') {
		t.Error("class not checked")
	}
}

func TestReplyText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                "plain",
		" a\r\nb\x00c\td  e\x7f\u0085f\u2028 ": "a b c d e f",
		"bad \xff utf8":                        "bad \uFFFD utf8",
	} {
		if got := ReplyText(in, MaxTextLen); got != want {
			t.Errorf("ReplyText(%q) = %q, want %q", in, got, want)
		}
	}
	for _, max := range []int{0, -1} {
		if got := ReplyText("", max); got != "" {
			t.Errorf("ReplyText(\"\", %d) = %q", max, got)
		}
	}
	long := ReplyText(strings.Repeat("é", 400), MaxTextLen)
	if len(long) > MaxTextLen || !utf8.ValidString(long) {
		t.Errorf("long text: %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
}

func TestHeaderField(t *testing.T) {
	for h, want := range map[string][2]string{
		"X-Rate: 5/h": {"X-Rate", " 5/h"}, "X:": {"X", ""}, "X: a: b": {"X", " a: b"},
		": v": {}, "no colon": {}, "X Y: v": {}, "X\x00: v": {}, "X\u00e9: v": {},
	} {
		name, value, ok := HeaderField(h)
		if ok != (want[0] != "") || name != want[0] || value != want[1] {
			t.Errorf("HeaderField(%q) = %q, %q, %v; want %q, %q", h, name, value, ok, want[0], want[1])
		}
	}
}
