// Package admin is the daemon's admin API, JSON over HTTP on a unix socket
// (mode 0660), and the services it shares with the web console (Local).
// Local.HTTPServer serves it; Client is the CLI's end. Backend is what the
// commands work on: a Client of the running daemon, else a Local on the
// state file.
//
// Routes (all answer JSON; errors are {"error": "..."} with a 4xx or 5xx
// status):
//
//	GET  /v1/status                  Status
//	GET  /v1/rate?key=K              []policy.KeyRate
//	GET  /v1/rates?top=N&over=1      []policy.KeyRate, nearest the limit first
//	POST /v1/rate/reset?key=K&limit=L ResetResult
//	GET  /v1/quarantine?sender=&key=&limit=&state=&since=  []quarantine.Entry
//	GET  /v1/quarantine/{id}?raw=1   ShowResult
//	POST /v1/quarantine/thaw         lifecycle.Selection → []lifecycle.Outcome
//	POST /v1/quarantine/delete       lifecycle.Selection → []lifecycle.Outcome
//	POST /v1/quarantine/suspend      SuspendRequest → SuspendResult
//	GET  /v1/events?since=&until=&key=&limit=&action=&max=&before=  []events.Event, newest first
//	GET  /v1/events/summary?...      []events.KeySummary (same query)
//
// Every action is logged with the peer's user (SO_PEERCRED).
package admin
