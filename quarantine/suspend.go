package quarantine

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// bucketSuspended maps a rate key -> sealed JSON Suspension.
var bucketSuspended = []byte("quarantine/suspended")

// Suspension records that a postmaster stopped automatic release for a
// key ("ratelimitd quarantine suspend KEY").
type Suspension struct {
	Key  string    `json:"key"`
	By   string    `json:"by,omitempty"`
	Time time.Time `json:"time"`
}

// Suspend stops automatic release for key until Resume; by says who.
// Errors: ErrInvalid (empty key), bbolt's.
func (s *Store) Suspend(key, by string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	v, err := json.Marshal(Suspension{Key: key, By: by, Time: s.now().Round(0)})
	if err != nil {
		return err
	}
	return s.write("suspend", func(tx *bolt.Tx, t *statedb.Tally) error {
		b := tx.Bucket(bucketSuspended)
		if b == nil {
			return errNoBuckets
		}
		return t.Put(b, suspendedPath, []byte(key), sealRecord([]byte(key), v))
	})
}

// Resume allows automatic release for key and reports whether it was
// suspended. Errors: bbolt's.
func (s *Store) Resume(key string) (bool, error) {
	found := false
	err := s.write("resume", func(tx *bolt.Tx, t *statedb.Tally) error {
		b := tx.Bucket(bucketSuspended)
		if b == nil || b.Get([]byte(key)) == nil {
			return nil
		}
		found = true
		return t.Delete(b, suspendedPath, []byte(key))
	})
	return found, err
}

// Suspended returns the suspended keys (unreadable records included).
// Errors: bbolt's.
func (s *Store) Suspended() (map[string]Suspension, error) {
	return view(s, "suspended", func(tx *bolt.Tx, out *map[string]Suspension) error {
		*out = map[string]Suspension{}
		b := tx.Bucket(bucketSuspended)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var sp Suspension
			if err := decodeRecord(k, v, &sp); err != nil {
				sp = Suspension{Key: string(k), By: "(record unreadable: ratelimitd state check)"}
			}
			(*out)[string(k)] = sp
			return nil
		})
	})
}
