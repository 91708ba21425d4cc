package main

import (
	"context"
	"fmt"
	"strings"
)

// redisCell is what Redis spent over the daemon's runs of one (C, K), on
// every listener, and the Redis floor measured at the same C and K.
type redisCell struct {
	conns, keys int
	cost        redisCost
	// floor is the Redis floor sending as fast as it is answered,
	// paced the same floor paced to the daemon's messages a second.
	floor, paced     redisFloorResult
	floorOK, pacedOK bool
}

// measuresRedis reports whether Redis's counters are read: the Redis
// backend of a daemon this program started.
func (b *bench) measuresRedis() bool { return b.o.backend == backendRedis && b.daemon != nil }

// redisCell returns the entry of (conns, keys) in b.redisCells, adding
// it if need be; the pointer is valid until the next call.
func (b *bench) redisCell(conns, keys int) *redisCell {
	for i := range b.redisCells {
		if c := &b.redisCells[i]; c.conns == conns && c.keys == keys {
			return c
		}
	}
	b.redisCells = append(b.redisCells, redisCell{conns: conns, keys: keys, cost: redisCost{perMessage: b.o.rcpts + 1}})
	return &b.redisCells[len(b.redisCells)-1]
}

// redisFloor measures the Redis floor at (conns, keys) for --duration
// after --warmup, on the daemon's Redis, once the daemon is idle.
func (b *bench) redisFloor(ctx context.Context, conns, keys, targetPID int) error {
	b.waitQuiet(ctx, targetPID)
	o := b.o
	res, err := runRedisFloor(ctx, redisFloorSpec{Addrs: o.redisAddrs, Masters: b.redisNodes, Prefix: b.daemon.f.Store.KeyPrefix,
		Conns: conns, Keys: keys, Pick: o.pick, Seed: o.seed, Warmup: o.warmup, Duration: o.duration})
	if err != nil {
		return err
	}
	if res.Messages == 0 {
		return fmt.Errorf("redis floor C=%d K=%d: no call answered (%d failed, first: %v)", conns, keys, res.Errors, res.FirstErr)
	}
	c := b.redisCell(conns, keys)
	c.floor, c.floorOK = res, true
	rate := c.cost.MessageRate()
	if rate <= 0 {
		return nil
	}
	b.waitQuiet(ctx, targetPID)
	res, err = runRedisFloor(ctx, redisFloorSpec{Addrs: o.redisAddrs, Masters: b.redisNodes, Prefix: b.daemon.f.Store.KeyPrefix,
		Conns: conns, Keys: keys, Pick: o.pick, Seed: o.seed, Warmup: o.warmup, Duration: o.duration, Rate: rate})
	if err != nil {
		return err
	}
	c = b.redisCell(conns, keys)
	c.paced, c.pacedOK = res, res.Messages > 0
	return nil
}

// printRedisFloors prints, for each (C, K), the daemon's Redis CPU per
// message against the Redis floor's, unpaced and paced to the daemon's
// message rate, and checks the target on the paced one; it reports
// whether the target was missed.
func (b *bench) printRedisFloors() (missed bool) {
	masters := len(b.redisNodes)
	for _, c := range b.redisCells {
		if !c.floorOK {
			continue
		}
		line, _ := floorLine(c.conns, c.keys, masters, "", c.floor, c.cost)
		b.printf("%s\n", line)
		if !c.pacedOK {
			continue
		}
		line, r := floorLine(c.conns, c.keys, masters, "paced to ratelimitd's messages/s", c.paced, c.cost)
		b.printf("%s\n", line)
		if line, m := floorTarget(c.conns, c.keys, masters, r); line != "" {
			b.printf("%s\n", line)
			missed = missed || m
		}
	}
	return missed
}

// redisServers starts the Redis of the Redis backend unless --redis-addrs
// names one (a redis-server, or a cluster of --redis-cluster masters),
// restricted to cpus unless that is nil, and finds the masters whose
// counters are read.
func (b *bench) redisServers(ctx context.Context, cpus []int) error {
	o := b.o
	if o.backend != backendRedis {
		return nil
	}
	switch {
	case o.cluster > 0:
		nodes, err := startRedisCluster(ctx, b.dir, o.cluster, cpus)
		if err != nil {
			return err
		}
		b.redis = nodes
		for _, n := range nodes {
			o.redisAddrs = append(o.redisAddrs, n.addr)
		}
		b.printf("redis cluster: %d masters on %s (no replicas, no persistence)\n", len(nodes), strings.Join(o.redisAddrs, ", "))
	case len(o.redisAddrs) == 0:
		r, err := startRedis(ctx, b.dir, cpus)
		if err != nil {
			return err
		}
		b.redis = []*child{r}
		o.redisAddrs = []string{r.addr}
		b.printf("redis-server: pid %d on %s (no persistence)\n", r.pid(), r.addr)
	}
	nodes, err := redisMasters(o.redisAddrs)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", strings.Join(o.redisAddrs, ","), err)
	}
	b.redisNodes = nodes
	if len(nodes) > 1 {
		b.printf("redis masters measured: %s\n", strings.Join(nodes, ", "))
	}
	return nil
}
