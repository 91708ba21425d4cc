package main

import (
	"embed"
	"strings"
)

// helpFiles are the commands' long help texts, one file per command path
// (help/quarantine-thaw.txt is `ratelimitd quarantine thaw --help`), kept
// as plain text so that they read (and are reviewed) as the operator sees
// them.
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText returns the long help of the command at path ("quarantine
// thaw"). A missing file is a mistake in the build, not in the use: it
// panics when the command tree is built, which every test of the CLI does.
func helpText(path string) string {
	b, err := helpFiles.ReadFile("help/" + strings.ReplaceAll(path, " ", "-") + ".txt")
	if err != nil {
		panic("ratelimitd: no help text for " + path + ": " + err.Error())
	}
	return strings.TrimSuffix(string(b), "\n")
}
