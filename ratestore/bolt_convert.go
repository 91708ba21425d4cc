package ratestore

import (
	"bytes"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// convert turns a file of format 1 or 2 (no checksums) into the current
// format, after restore read it whole without finding an unreadable
// record: it compacts the journal (compaction writes sealed values and
// deletes the old records), seals the snapshot's remaining bare values
// pieceKeys at a time, then, in one transaction, the stored parameters
// and the format version. Until that last transaction the file stays of
// format 2, whose reader takes bare and sealed records alike, so a crash
// at any point leaves it readable and the next start converts it again.
func (p *Persistent) convert() error {
	if err := p.compact(nil); err != nil {
		return fmt.Errorf("store: convert %s: %w", p.db.Path(), err)
	}
	var names [][]byte
	if err := p.view(func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketName)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(k []byte) error {
			names = append(names, bytes.Clone(k))
			return nil
		})
	}); err != nil {
		return err
	}
	for _, name := range names {
		if err := p.sealBucket(name); err != nil {
			return fmt.Errorf("store: convert %s/%s: %w", bucketName, name, err)
		}
	}
	err := p.update(func(tx *bbolt.Tx, t *statedb.Tally) error {
		if b := tx.Bucket(metaName); b != nil {
			var ks, vs [][]byte
			b.ForEach(func(k, v []byte) error {
				if len(v) == metaLen {
					ks, vs = append(ks, bytes.Clone(k)), append(vs, statedb.Seal(nil, k, metaVersion, v))
				}
				return nil
			})
			for i := range ks {
				if err := t.Put(b, metaPath, ks[i], vs[i]); err != nil {
					return err
				}
			}
		}
		root, err := tx.CreateBucketIfNotExists(bucketName)
		if err != nil {
			return err
		}
		return t.Put(root, rootPath, versionKey, []byte(formatVersion))
	})
	if err != nil {
		return fmt.Errorf("store: convert %s: %w", p.db.Path(), err)
	}
	p.sealed = true
	p.log.Info("rate state file converted to checksummed records", "file", p.db.Path(), "format", formatVersion)
	return nil
}

// sealBucket seals the bare (16-byte) values of the snapshot bucket of
// limit name, at most pieceKeys per transaction.
func (p *Persistent) sealBucket(name []byte) error {
	var from []byte
	for {
		var ks, vs [][]byte
		var next []byte
		err := p.view(func(tx *bbolt.Tx) error {
			c := tx.Bucket(bucketName).Bucket(name).Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
			}
			for n := 0; k != nil; k, v = c.Next() {
				if n == p.pieceKeys {
					next = bytes.Clone(k)
					break
				}
				if len(v) == valueLen {
					ks, vs = append(ks, bytes.Clone(k)), append(vs, sealState(nil, k, stateOf(v)))
				}
				n++
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(ks) > 0 {
			if err := p.update(func(tx *bbolt.Tx, t *statedb.Tally) error {
				b := tx.Bucket(bucketName).Bucket(name)
				for i := range ks {
					if err := t.Put(b, []string{string(bucketName), string(name)}, ks[i], vs[i]); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}
