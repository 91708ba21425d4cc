package main

import (
	"embed"
	"strings"
)

// helpFiles are the commands' long help texts, one per command path
// (help/quarantine-thaw.txt is `ratelimitd quarantine thaw --help`).
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText returns the long help of the command at path ("quarantine
// thaw"); it panics if the file is missing (a build mistake).
func helpText(path string) string {
	b, err := helpFiles.ReadFile("help/" + strings.ReplaceAll(path, " ", "-") + ".txt")
	if err != nil {
		panic("ratelimitd: no help text for " + path + ": " + err.Error())
	}
	return strings.TrimSuffix(string(b), "\n")
}
