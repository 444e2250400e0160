// Package pace owns how a replica's background reads and writes share the
// database with the claims of the fires due meanwhile: a read or a bulk
// write that nothing waits for (the live first sightings a joining replica
// reads, the first sightings a first start writes, the decided slots a
// hand-over reads only to record older gaps) is followed by a rest a
// multiple of what it took.
package pace

import (
	"context"
	"time"
)

// RestFactor is how many times what a background read (or write) took its
// reader rests after it: each reader asks at most a quarter of the server's time,
// and less of a server that answers slowly, so that two or three of them
// at once (the survivors of a death handing jobs over while a replica
// joins) still leave the claims most of it.
const RestFactor = 3

// Rest waits RestFactor times took after a background read or write. It returns
// nil once that is over, or at once when stop is closed (nil: never; a
// reader being closed reads the rest without resting), and ctx's error
// when ctx ends first.
func Rest(ctx context.Context, took time.Duration, stop <-chan struct{}) error {
	t := time.NewTimer(RestFactor * took)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return nil
	case <-t.C:
		return nil
	}
}
