package jobs

import "time"

// MinLockTTL is the shortest lock lease (config lock.ttl) the configuration
// accepts. A running action's lease is renewed every TTL/3, each renewal
// bounded by that same interval, and a run is abandoned once a renewal can
// no longer land before the lease ends. At 3 s a renewal every second
// still has time for one slow or failed database round trip and for a
// clock difference of well under a second between replicas; a shorter
// lease abandons runs on ordinary latency. It is a floor, not a
// recommendation: a lease that must survive a replica-set election wants
// 30 s or more (the default is DefaultLockTTL).
const MinLockTTL = 3 * time.Second
