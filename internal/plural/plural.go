// Package plural writes a count and its noun for operators: "1 message",
// "3 messages", "0 keys". Nouns are English; the plural adds "s" (a
// consonant and "y" become "ies": "1 entry", "2 entries").
package plural

import (
	"strconv"
	"strings"
)

// N is n followed by noun (given in the singular), in the plural unless
// n is 1.
func N(n int, noun string) string {
	return strconv.Itoa(n) + " " + Of(n, noun)
}

// Of is noun (given in the singular) in the plural unless n is 1; of a
// phrase ("rate state") only the last word changes.
func Of(n int, noun string) string {
	if n == 1 || noun == "" {
		return noun
	}
	if strings.HasSuffix(noun, "y") && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])) {
		return noun[:len(noun)-1] + "ies"
	}
	return noun + "s"
}
