package quarantine

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// bucketSuspended maps a rate key -> JSON Suspension: keys whose held
// and frozen mail is not released automatically.
var bucketSuspended = []byte("quarantine/suspended")

// Suspension records that a postmaster stopped automatic release for a
// key ("ratelimitd quarantine suspend KEY").
type Suspension struct {
	Key  string    `json:"key"`
	By   string    `json:"by,omitempty"`
	Time time.Time `json:"time"`
}

// Suspend stops automatic release for key until Resume; by says who
// (for the audit trail). Suspending a suspended key updates By and Time.
// It commits (fsync) before returning. Errors: ErrInvalid (empty key),
// bbolt errors.
func (s *Store) Suspend(key, by string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	v, err := json.Marshal(Suspension{Key: key, By: by, Time: s.now().Round(0)})
	if err != nil {
		return err
	}
	err = statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b := tx.Bucket(bucketSuspended)
		if b == nil {
			return fmt.Errorf("quarantine: buckets missing (database not initialised by quarantine.New)")
		}
		return t.Put(b, suspendedPath, []byte(key), sealRecord([]byte(key), v))
	})
	if err != nil {
		return wrap("suspend", err)
	}
	return s.syncIfNoSync()
}

// Resume allows automatic release for key again and reports whether it
// was suspended. Errors: bbolt errors.
func (s *Store) Resume(key string) (bool, error) {
	found := false
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b := tx.Bucket(bucketSuspended)
		if b == nil || b.Get([]byte(key)) == nil {
			return nil
		}
		found = true
		return t.Delete(b, suspendedPath, []byte(key))
	})
	if err != nil {
		return false, wrap("resume", err)
	}
	return found, s.syncIfNoSync()
}

// Suspended returns the suspended keys (a database never written by this
// version has none). Errors: ErrCorrupt, bbolt errors.
func (s *Store) Suspended() (map[string]Suspension, error) {
	out := map[string]Suspension{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSuspended)
		if b == nil {
			return nil
		}
		sealed := sealedTx(tx)
		return b.ForEach(func(k, v []byte) error {
			var sp Suspension
			if err := decodeRecord(k, v, sealed, &sp); err != nil {
				// Kept suspended, unreadable: automatic release
				// of the key stays stopped.
				sp = Suspension{Key: string(k), By: "(record unreadable: ratelimitd state check)"}
			}
			out[string(k)] = sp
			return nil
		})
	})
	if err != nil {
		return nil, wrap("suspended", err)
	}
	return out, nil
}
