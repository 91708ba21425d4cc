package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// storeLimits returns the compiled parameters of c's limits; nil for a
// configuration the engine refuses.
func storeLimits(c policy.Config) map[string]ratelimit.Limit {
	m, _ := policy.LimitParams(c)
	return m
}

// offline is the state opened by the CLI when no daemon runs; db and state
// are nil when a read-only open found no file.
type offline struct {
	db     *bolt.DB
	state  *ratestore.Persistent
	engine *policy.Engine
	events *events.Log // the operator's actions; nil without [events]
}

// openOffline opens the state; readOnly shares the file and writes nothing.
func openOffline(f *config.File, readOnly bool) (_ *offline, err error) {
	mem := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: f.Server.MaxKeys})
	db, err := statedb.Open(f.Server.DBPath(), readOnly, 0)
	if errors.Is(err, statedb.ErrNoFile) {
		eng, err := policy.NewEngine(f.PolicyConfig(), mem)
		return &offline{engine: eng}, err
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	state, err := ratestore.NewPersistent(db, mem, ratestore.PersistOptions{Limits: storeLimits(f.PolicyConfig()), ReadOnly: readOnly})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Server.DBPath(), err)
	}
	eng, err := policy.NewEngine(f.PolicyConfig(), state)
	if err != nil {
		return nil, err
	}
	o := &offline{db: db, state: state, engine: eng}
	if !readOnly && f.Events.On() {
		if o.events, err = events.Open(db, eventOptions(f)); err != nil {
			state.Close()
			return nil, fmt.Errorf("%s: %w", f.Server.DBPath(), err)
		}
	}
	return o, nil
}

// close writes any rate change (a reset) and closes the file.
func (o *offline) close() error {
	if o.db == nil {
		return nil
	}
	return errors.Join(o.state.Close(), o.events.Close(), o.db.Close())
}

// OpenRates opens f's rate state for the rate commands when no daemon
// runs: Redis, or the state file, read-only unless write (rate reset).
func OpenRates(f *config.File, write bool) (*admin.Local, error) {
	if f.Store.Redis() {
		return openRedisRates(f)
	}
	o, err := openOffline(f, !write)
	if err != nil {
		return nil, err
	}
	return &admin.Local{RateState: o.engine, Events: o.events, Closer: o.close}, nil
}

// openRedisRates answers the rate commands from Redis directly.
func openRedisRates(f *config.File) (*admin.Local, error) {
	var eng *policy.Engine
	r, err := redisstore.New(context.Background(), redisOptions(f.Store, engineLimits(&eng)))
	if err != nil {
		return nil, fmt.Errorf("store: redis %v: %w", f.Store.RedisAddrs, err)
	}
	if eng, err = policy.NewEngine(f.PolicyConfig(), r); err != nil {
		r.Close()
		return nil, err
	}
	return &admin.Local{RateState: redisClock{Rates: eng, now: r.RedisTime}, Closer: func() error { r.Close(); return nil }}, nil
}

// OpenQuarantine opens f's state file for writing with its quarantine, for
// the quarantine commands when no daemon runs.
func OpenQuarantine(f *config.File) (*admin.Local, error) {
	o, err := openOffline(f, false)
	if err != nil {
		return nil, err
	}
	svc, err := newLifecycle(o.db, f, o.engine, newLogger(f.Server, io.Discard), eventRecorder{o.events})
	if err != nil {
		o.close()
		return nil, err
	}
	return &admin.Local{RateState: o.engine, Quarantine: svc, Events: o.events, Closer: o.close}, nil
}

// InspectState is what `ratelimitd state check` reads beyond the records:
// f's rate state as the daemon would restore it, without writing, counting
// states per limit (malformed ones are problems), then every frozen
// message against its SHA-256.
func InspectState(f *config.File) statedb.Inspect {
	return func(w io.Writer, db *bolt.DB) (bad []string, err error) {
		mem := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: f.Server.MaxKeys})
		// Unreadable records are reported by Check's scan of every record.
		p, err := ratestore.NewPersistent(db, mem, ratestore.PersistOptions{Limits: storeLimits(f.PolicyConfig()),
			ReadOnly: true, SkipLost: true})
		if err != nil {
			return nil, err
		}
		per := map[string]int{}
		mem.Range(context.Background(), func(limit, _ string, _ ratelimit.State) bool {
			per[limit]++
			return true
		})
		st := p.Stats()
		fmt.Fprintf(w, "rate state: %d states readable, %d decayed or malformed (%d malformed), journal %d bytes\n",
			st.Restored, st.Dropped, st.Malformed, st.Journal)
		for _, limit := range slices.Sorted(maps.Keys(per)) {
			desc := "parameters unknown"
			if l, ok := p.Params(limit); ok {
				desc = fmt.Sprintf("%s %g per %s", l.Algorithm, l.Limit, human.Duration(l.Period))
			}
			fmt.Fprintf(w, "  limit %s: %d states (%s)\n", limit, per[limit], desc)
		}
		p.Close()
		if st.Malformed > 0 {
			bad = append(bad, fmt.Sprintf("%d malformed rate states", st.Malformed))
		}
		more, err := quarantine.CheckMessages(w, db)
		return append(bad, more...), err
	}
}

// NotifyOffline sends one event from the CLI, waiting up to 30 s; without
// notifications configured it does nothing.
func NotifyOffline(cfg notify.Config, e notify.Event) error {
	n, err := notify.New(cfg, notify.Options{})
	if err != nil || !n.Enabled() {
		return err
	}
	n.Notify(e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		return err
	}
	if st := n.Stats(); st.Failed > 0 {
		return fmt.Errorf("%d notifications failed", st.Failed)
	}
	return nil
}
