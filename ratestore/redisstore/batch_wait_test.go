package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchWaitEndsByTimeout: while a call hangs past its deadline (as a
// library waiting on a dial may), the request in it and the one queued
// behind it both return ErrUnavailable by Timeout instead of waiting for
// the call; once the call returns, the batcher has nothing in flight.
func TestBatchWaitEndsByTimeout(t *testing.T) {
	s := &Store{opts: Options{Timeout: 20 * time.Millisecond}}
	release := make(chan struct{})
	b := &batcher{send: func(context.Context, ...*request) (answer, error) {
		<-release // ignores its context
		return answer{}, nil
	}}
	errs := make(chan error, 2)
	ask := func() {
		r := new(request)
		_, err := s.decideBatched(context.Background(), b, r)
		errs <- err
	}
	go ask()
	for inFlight(b) == 0 {
		time.Sleep(time.Millisecond)
	}
	go ask() // joins the pending batch behind the hung call
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err %v, want ErrUnavailable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request still waits on a call that hangs past its deadline")
		}
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); inFlight(b) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still in flight after the hung call returned", inFlight(b))
		}
	}
}

func inFlight(b *batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}
