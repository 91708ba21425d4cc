package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// slotTags()[s] is the first decimal number whose hash slot is s.
var slotTags = sync.OnceValue(func() *[slotCount]string {
	var tags [slotCount]string
	for i, left := 0, slotCount; left > 0; i++ {
		t := strconv.Itoa(i)
		if sl := Slot(t); tags[sl] == "" {
			tags[sl] = t
			left--
		}
	}
	return &tags
})

// probeSlot reads a key on slot's node (refused if LOADING or BUSY);
// the caller has connected. Errors wrap ErrUnavailable.
func (s *Store) probeSlot(ctx context.Context, slot uint16) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	key := s.prefix + "{probe}"
	if s.Cluster() {
		key = s.prefix + "{" + slotTags()[slot] + "}probe"
	}
	return unavailable(c.Do(ctx, c.B().Exists().Key(key).Build()).Error())
}

// slotOwners returns each slot's master address ("" for none), for the
// Failover's probe: a silent node's slots are all marked down.
func (s *Store) slotOwners(ctx context.Context) (*[slotCount]string, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	var last error = fmt.Errorf("%w: no cluster node", ErrUnavailable)
	for _, n := range c.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		v, err := n.Do(cctx, n.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err != nil {
			last = unavailable(err)
			continue
		}
		var owners [slotCount]string
		for _, r := range v {
			f, err := r.ToArray()
			if err != nil || len(f) < 3 {
				continue
			}
			lo, err1 := f[0].AsInt64()
			hi, err2 := f[1].AsInt64()
			m, err3 := f[2].ToArray()
			if err1 != nil || err2 != nil || err3 != nil || len(m) < 2 || lo < 0 || hi >= slotCount {
				continue
			}
			host, _ := m[0].ToString()
			port, _ := m[1].AsInt64()
			for sl := lo; sl <= hi; sl++ {
				owners[sl] = host + ":" + strconv.FormatInt(port, 10)
			}
		}
		return &owners, nil
	}
	return nil, last
}
