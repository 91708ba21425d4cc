// Package configs holds the example configuration files shipped with
// ratelimitd; ratelimitd.toml is also compiled into the binary as the
// default configuration.
package configs

import _ "embed"

// Default is the text of configs/ratelimitd.toml: 200/hour (leaky) plus
// 1000/day (strict) per authenticated user, deferring with 450 4.7.1.
//
//go:embed ratelimitd.toml
var Default []byte
