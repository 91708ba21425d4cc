package main

import (
	"context"
	"net"
	"net/http"

	"github.com/ratelimitd/ratelimitd/policy"
)

// quarantineState is the daemon's quarantine and milter front end.
type quarantineState struct{}

func (d *daemon) openQuarantine() error                                                     { return nil }
func (d *daemon) startMilter(ls *[]net.Listener) error                                      { return nil }
func (d *daemon) serveMilter()                                                              {}
func (d *daemon) stopMilter(ctx context.Context)                                            {}
func (d *daemon) recordHold(ctx context.Context, req *policy.Request, dec *policy.Decision) {}
func (d *daemon) quarantineRoutes(mux *http.ServeMux)                                       {}
