// Package cliout prints the ratelimitd command line's tables, JSON, prompts
// and errors for operators. Client-supplied strings pass through termsafe;
// JSON output is exact. Functions keep no state.
package cliout
