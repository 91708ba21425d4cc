//go:build !milter

package main

import (
	"context"
	"net"
)

type milterFrontEnd struct{}

func (d *daemon) startMilter(ls *[]net.Listener) error { return nil }
func (d *daemon) serveMilter()                         {}
func (d *daemon) stopMilter(ctx context.Context)       { d.q.stopExpire() }
