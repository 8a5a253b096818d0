package quorum

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltOptions makes a second fenced on the same data directory fail fast
// instead of waiting forever for the file lock.
func boltOptions() *bolt.Options {
	return &bolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true}
}
