package scheduler

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// madeShards counts the shards of e whose robfig engine was made.
func madeShards(e *Engine) int {
	n := 0
	for _, sh := range e.shards {
		sh.mu.Lock()
		if sh.cron != nil {
			n++
		}
		sh.mu.Unlock()
	}
	return n
}

// idsInOwnShards returns n job ids (prefix-0, prefix-1, …) of which no two
// hash onto one shard of e.
func idsInOwnShards(e *Engine, prefix string, n int, taken map[int]bool) []string {
	var ids []string
	for k := 0; len(ids) < n; k++ {
		id := fmt.Sprintf("%s-%d", prefix, k)
		if i := e.shardIndex(id); !taken[i] {
			taken[i] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// TestShardsAreMadeWhenFirstNeeded: a shard's robfig engine (its goroutine
// and timer) is made only when the shard first gets an entry, so an engine
// of a few jobs runs a few of them whatever its shard count. A shard made
// while the engine is stopped starts with it, one made while it runs starts
// at once, and one a Sync pauses before it was made starts at the Sync's
// end: each of their jobs fires.
func TestShardsAreMadeWhenFirstNeeded(t *testing.T) {
	t.Parallel() // waits on real time
	idle := New(Options{Shards: DefaultShards, Logger: quiet()})
	idle.Start()
	if n := madeShards(idle); n != 0 {
		t.Fatalf("a started engine without jobs made %d robfig engines, want 0", n)
	}
	<-idle.Stop().Done()

	var (
		mu    sync.Mutex
		fired = map[string]int{}
	)
	e := New(Options{Shards: 64, Logger: quiet(), Fire: func(d schedule.Due) {
		mu.Lock()
		defer mu.Unlock()
		fired[d.Schedule.ID]++
	}})
	taken := map[int]bool{}
	stopped := idsInOwnShards(e, "stopped", 1, taken)
	expect(t, e.Reload(sch(stopped[0], "* * * * * *")), Added)
	if n := madeShards(e); n != 1 {
		t.Fatalf("%d robfig engines made for one job, want 1", n)
	}
	e.Start()
	t.Cleanup(func() { <-e.Stop().Done() })
	running := idsInOwnShards(e, "running", 1, taken)
	expect(t, e.Reload(sch(running[0], "* * * * * *")), Added)
	synced := idsInOwnShards(e, "synced", 3, taken)
	items := []Item{{Schedule: sch(stopped[0], "* * * * * *")}, {Schedule: sch(running[0], "* * * * * *")}}
	for _, id := range synced {
		items = append(items, Item{Schedule: sch(id, "* * * * * *")})
	}
	if st := syncItems(e, items); st.Added != 3 || st.Unchanged != 2 {
		t.Fatalf("Sync = %+v", st)
	}
	if n := madeShards(e); n != len(items) {
		t.Fatalf("%d robfig engines made for %d jobs in their own shards, want %d", n, len(items), len(items))
	}
	for _, it := range items {
		mustEntry(t, e, it.Schedule.ID) // a running shard computed its next run
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(fired)
		mu.Unlock()
		if n == len(items) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s %d of %d jobs fired: %v", n, len(items), fired)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
