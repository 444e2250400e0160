package scheduler

// Benchmarks for the engine's performance targets (edit to armed, full
// load, fire lateness). They report distributions
// (p50/p99 of per-operation durations) and ratios against the obvious use of
// robfig/cron v3 (AddFunc on one running cron.Cron per schedule,
// Remove+AddFunc per edit) measured in the same process. scripts/bench-engine.sh
// runs them with suitable -benchtime values.
//
// The 100,000-schedule baseline load takes about a minute, so
// BenchmarkBaselineAddFunc only includes n=100k when
// CRONSWAP_BENCH_BASELINE_100K=1 is set.

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronswap/cronswap/schedule"
)

// benchSizes are the numbers of schedules the load benchmarks use.
var benchSizes = []struct {
	name string
	n    int
}{{"n=10k", 10_000}, {"n=30k", 30_000}, {"n=100k", 100_000}}

func benchID(i int) string { return fmt.Sprintf("job-%06d", i) }

// benchSpec is a daily-or-weekly five-field expression; 10,080 distinct ones
// repeat over the jobs, as real fleets repeat their favourite times.
func benchSpec(i int) string {
	return fmt.Sprintf("%d %d * * %d", i%60, (i/60)%24, (i/1440)%7)
}

func benchItems(n int) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{Schedule: schedule.Schedule{ID: benchID(i), CronExpr: benchSpec(i), Enabled: true,
			Job: "noop", Category: "bench", Args: `{"i":1}`}}
	}
	return items
}

func benchEngine(opts Options) *Engine {
	opts.Logger = quiet()
	e := New(opts)
	e.Start()
	return e
}

func stopEngine(b *testing.B, e *Engine) {
	select {
	case <-e.Stop().Done():
	case <-time.After(time.Minute):
		b.Fatal("engine did not stop within a minute")
	}
}

// pct returns the p-th percentile (0 < p <= 100) of ds by nearest rank.
func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// syncOnce loads items into a new running engine and returns how long Sync
// took. The benchmark timer runs during Sync only.
func syncOnce(b *testing.B, items []Item) time.Duration {
	b.Helper()
	b.StopTimer()
	e := benchEngine(Options{})
	b.StartTimer()
	t0 := time.Now()
	st := syncItems(e, items)
	d := time.Since(t0)
	b.StopTimer()
	if st.Added != len(items) || e.Len() != len(items) {
		b.Fatalf("Sync added %d, %d armed; want %d", st.Added, e.Len(), len(items))
	}
	stopEngine(b, e)
	runtime.GC() // the previous engine's garbage is not the next Sync's cost
	b.StartTimer()
	return d
}

// baselineOnce loads the same specs the obvious way: AddFunc on a running
// cron.Cron, one call per schedule.
func baselineOnce(b *testing.B, items []Item) time.Duration {
	b.Helper()
	c := cron.New()
	c.Start()
	t0 := time.Now()
	for _, it := range items {
		if _, err := c.AddFunc(it.Schedule.CronExpr, func() {}); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(t0)
	<-c.Stop().Done()
	return d
}

// BenchmarkSync measures one Sync of n schedules into an empty running
// engine. ns/op is the mean; sync_p50_ms the median over the iterations.
func BenchmarkSync(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			items := benchItems(sz.n)
			var ds []time.Duration
			b.ResetTimer()
			for range b.N {
				ds = append(ds, syncOnce(b, items))
			}
			b.StopTimer()
			b.ReportMetric(ms(pct(ds, 50)), "sync_p50_ms")
			b.ReportMetric(ms(slices.Max(ds)), "sync_max_ms")
		})
	}
}

// BenchmarkSyncDistinct is BenchmarkSync/n=100k with every expression
// distinct (six fields, one per second of the day, 86,400 in all), the worst
// case for Sync's per-snapshot parse cache.
func BenchmarkSyncDistinct(b *testing.B) {
	const n = 100_000
	items := benchItems(n)
	for i := range items {
		items[i].Schedule.CronExpr = fmt.Sprintf("%d %d %d * * *", i%60, (i/60)%60, (i/3600)%24)
	}
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		ds = append(ds, syncOnce(b, items))
	}
	b.StopTimer()
	b.ReportMetric(ms(pct(ds, 50)), "sync_p50_ms")
	b.ReportMetric(ms(slices.Max(ds)), "sync_max_ms")
}

// BenchmarkResyncUnchanged measures a periodic full resync that finds
// nothing changed: Sync of the same 100,000 schedules into an engine that
// has them all armed (documents re-read, so updated_at may differ).
func BenchmarkResyncUnchanged(b *testing.B) {
	const n = 100_000
	e := armedEngine(b, n)
	defer stopEngine(b, e)
	items := benchItems(n)
	now := time.Now().UTC() // as the decoder makes it: UTC, no monotonic reading
	for i := range items {
		items[i].Schedule.UpdatedAt = now
	}
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		st := syncItems(e, items)
		ds = append(ds, time.Since(t0))
		if st.Unchanged != n || len(st.Changed) != 0 {
			b.Fatalf("resync: %d unchanged, %d changed", st.Unchanged, len(st.Changed))
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(pct(ds, 50)), "sync_p50_ms")
	b.ReportMetric(ms(slices.Max(ds)), "sync_max_ms")
}

// BenchmarkBaselineAddFunc measures, in the same process and alternating
// within each iteration, the obvious robfig load (AddFunc per schedule on a
// running cron.Cron) and the engine's Sync of the same specs, and reports
// both medians and ratio = baseline / engine (median of the per-iteration
// ratios). ns/op is the sum of both. n=100k runs only with
// CRONSWAP_BENCH_BASELINE_100K=1 (the baseline alone takes about a minute).
func BenchmarkBaselineAddFunc(b *testing.B) {
	for _, sz := range benchSizes {
		if sz.n > 30_000 && os.Getenv("CRONSWAP_BENCH_BASELINE_100K") != "1" {
			continue
		}
		b.Run(sz.name, func(b *testing.B) {
			items := benchItems(sz.n)
			var base, eng, ratio []float64
			for range b.N {
				bd := baselineOnce(b, items)
				ed := syncOnce(b, items)
				base, eng = append(base, ms(bd)), append(eng, ms(ed))
				ratio = append(ratio, float64(bd)/float64(ed))
			}
			b.ReportMetric(median(base), "baseline_ms")
			b.ReportMetric(median(eng), "engine_ms")
			b.ReportMetric(median(ratio), "ratio")
		})
	}
}

// armedEngine returns a running engine with n armed jobs (benchItems).
func armedEngine(b *testing.B, n int) *Engine {
	b.Helper()
	e := benchEngine(Options{})
	if st := syncItems(e, benchItems(n)); st.Added != n {
		b.Fatalf("Sync added %d of %d", st.Added, n)
	}
	return e
}

// reportDurations reports p50/p99/max of per-operation durations in ns.
func reportDurations(b *testing.B, ds []time.Duration) {
	b.ReportMetric(float64(pct(ds, 50)), "p50_ns")
	b.ReportMetric(float64(pct(ds, 99)), "p99_ns")
	b.ReportMetric(float64(slices.Max(ds)), "max_ns")
}

// BenchmarkReloadChanged measures one Reload whose expression changed (the
// job is re-armed) with n jobs armed; successive operations walk over the
// jobs so no job is edited twice in a row.
func BenchmarkReloadChanged(b *testing.B) {
	benchReloads(b, Replaced, func(items []Item) func(k int) schedule.Schedule {
		flipped := make([]bool, len(items))
		return func(k int) schedule.Schedule {
			s := items[k].Schedule
			if flipped[k] = !flipped[k]; flipped[k] {
				s.CronExpr = "30 3 * * *"
			}
			return s
		}
	})
}

// BenchmarkReloadUnchanged measures one Reload of a re-saved document
// (new updated_at, same timing) with n jobs armed: robfig is not touched.
func BenchmarkReloadUnchanged(b *testing.B) {
	benchReloads(b, Unchanged, func(items []Item) func(k int) schedule.Schedule {
		now := time.Now().UTC() // as the decoder makes it: UTC, no monotonic reading
		return func(k int) schedule.Schedule {
			s := items[k].Schedule
			s.UpdatedAt = now
			return s
		}
	})
}

// benchReloads times one Reload per operation on an engine with n jobs
// armed, for each size but the smallest. edit builds, from the armed items,
// the schedule to reload for job k; every Reload must give want. Successive
// operations visit the jobs in a stride of 7919 (a prime, so every job).
func benchReloads(b *testing.B, want Outcome, edit func(items []Item) func(k int) schedule.Schedule) {
	for _, sz := range benchSizes[1:] {
		b.Run(sz.name, func(b *testing.B) {
			e := armedEngine(b, sz.n)
			defer stopEngine(b, e)
			next := edit(benchItems(sz.n))
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				s := next((i * 7919) % sz.n)
				t0 := time.Now()
				o := e.Reload(s)
				ds = append(ds, time.Since(t0))
				if o != want {
					b.Fatalf("outcome %s, want %s", o, want)
				}
			}
			b.StopTimer()
			reportDurations(b, ds)
		})
	}
}

// BenchmarkBaselineRemoveAdd measures the obvious edit of one job on a
// running cron.Cron holding n entries: Remove, then AddFunc the new spec.
// The n entries are added before Start so that setting up 100k does not take
// a minute; the edits run on the started engine.
func BenchmarkBaselineRemoveAdd(b *testing.B) {
	for _, sz := range benchSizes[1:] {
		b.Run(sz.name, func(b *testing.B) {
			c := cron.New()
			ids := make([]cron.EntryID, sz.n)
			for i := range ids {
				id, err := c.AddFunc(benchSpec(i), func() {})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = id
			}
			c.Start()
			defer func() { <-c.Stop().Done() }()
			flipped := make([]bool, sz.n)
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				k := (i * 7919) % sz.n
				spec := benchSpec(k)
				if flipped[k] = !flipped[k]; flipped[k] {
					spec = "30 3 * * *"
				}
				t0 := time.Now()
				c.Remove(ids[k])
				id, err := c.AddFunc(spec, func() {})
				ds = append(ds, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				ids[k] = id
			}
			b.StopTimer()
			reportDurations(b, ds)
		})
	}
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkHeapPerJob reports the live heap the engine retains per armed job
// with 100,000 armed (CRONSWAP_BENCH_HEAP_JOBS sets another count): everything allocated from building the schedules
// through Sync, minus what is garbage once the snapshot is dropped.
// baseline_bytes/entry is the same for a robfig cron.Cron loaded the obvious
// way (before Start, to keep it fast; the heap is the same).
// sync_allocs/job counts the allocations Sync makes per job.
// held_bytes/job is the same for an engine that arms none of the jobs
// (Options.Arms false for all: a replica that divides the schedules keeps
// the jobs another replica arms as their last known good).
func BenchmarkHeapPerJob(b *testing.B) {
	n := 100_000
	if v := os.Getenv("CRONSWAP_BENCH_HEAP_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("CRONSWAP_BENCH_HEAP_JOBS=%q: want a count of jobs", v)
		}
	}
	var per, allocs, basePer, heldPer []float64
	for range b.N {
		before := heapInUse()
		held := benchEngine(Options{Arms: func(string) bool { return false }})
		syncItems(held, benchItems(n))
		after := heapInUse()
		if held.Len() != 0 || held.Known() != n {
			b.Fatalf("%d armed, %d known; want 0 and %d", held.Len(), held.Known(), n)
		}
		heldPer = append(heldPer, float64(int64(after)-int64(before))/float64(n))
		stopEngine(b, held)
		runtime.KeepAlive(held)
		held = nil

		before = heapInUse()
		e := benchEngine(Options{})
		items := benchItems(n)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		syncItems(e, items)
		runtime.ReadMemStats(&m1)
		allocs = append(allocs, float64(m1.Mallocs-m0.Mallocs)/float64(n))
		items = nil
		after = heapInUse()
		if e.Len() != n {
			b.Fatalf("%d armed, want %d", e.Len(), n)
		}
		per = append(per, float64(int64(after)-int64(before))/float64(n))
		stopEngine(b, e)
		runtime.KeepAlive(e)
		e = nil

		before = heapInUse()
		c := cron.New()
		for i := range n {
			if _, err := c.AddFunc(benchSpec(i), func() {}); err != nil {
				b.Fatal(err)
			}
		}
		c.Start()
		after = heapInUse()
		basePer = append(basePer, float64(int64(after)-int64(before))/float64(n))
		<-c.Stop().Done()
		runtime.KeepAlive(c)
	}
	b.ReportMetric(median(per), "bytes/job")
	b.ReportMetric(median(allocs), "sync_allocs/job")
	b.ReportMetric(median(basePer), "baseline_bytes/entry")
	b.ReportMetric(median(heldPer), "held_bytes/job")
}

// BenchmarkHeapPerEditedJob reports the live heap the engine retains per
// job after every job was edited once (edited_bytes/job): 20,000 jobs in
// the scale bench's zones, loaded by a Sync (which parses each distinct
// expression once) and then each given an expression of its own by Reload,
// as edits arrive — every job parsed alone, its zone included.
func BenchmarkHeapPerEditedJob(b *testing.B) {
	const n = 20_000
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney"}
	var per []float64
	for range b.N {
		items := benchItems(n)
		for i := range items {
			items[i].Schedule.Timezone = zones[i%len(zones)]
		}
		before := heapInUse()
		e := benchEngine(Options{})
		syncItems(e, items)
		for i, it := range items {
			it.Schedule.CronExpr = fmt.Sprintf("%d %d %d * *", (i+7)%60, (i/60)%24, 1+i%28)
			if o := e.Reload(it.Schedule); o != Replaced {
				b.Fatalf("edit of %s: %v, want Replaced", it.Schedule.ID, o)
			}
		}
		items = nil
		e.retired.wait()
		after := heapInUse()
		per = append(per, float64(int64(after)-int64(before))/n)
		stopEngine(b, e)
		runtime.KeepAlive(e)
	}
	b.ReportMetric(median(per), "edited_bytes/job")
}

// BenchmarkFireLateness arms 10,000 hourly jobs due in the same second (the
// third whole second from now, in real time: robfig fires on the wall
// clock) with a no-op fire callback that records dispatch lateness = time of
// the callback minus the slot. It reports its p50/p99/max in ms, and cpu_ms,
// the CPU time the process used from 100ms before the slot until the last
// callback (the engine's own work, as opposed to waiting for a core on a
// loaded machine).
func BenchmarkFireLateness(b *testing.B) {
	const n = 10_000
	var p50, p99, pmax, cpu []float64
	for range b.N {
		lat := make([]time.Duration, n)
		var got atomic.Int64
		done := make(chan struct{})
		var wrongSlot atomic.Int64
		var slotAt time.Time // written before Sync, read by callbacks after
		e := benchEngine(Options{Fire: func(due schedule.Due) {
			slot := due.Slot
			d := time.Since(slot)
			if !slot.Equal(slotAt) {
				wrongSlot.Add(1)
			}
			if k := got.Add(1); k <= n {
				lat[k-1] = d
				if k == n {
					close(done)
				}
			}
		}})
		slotAt = time.Now().UTC().Truncate(time.Second).Add(3 * time.Second)
		// An hourly fleet whose minute and second are the slot's.
		spec := fmt.Sprintf("%d %d * * * *", slotAt.Second(), slotAt.Minute())
		items := make([]Item, n)
		for i := range items {
			items[i] = Item{Schedule: schedule.Schedule{ID: benchID(i), CronExpr: spec, Enabled: true}}
		}
		syncItems(e, items)
		if !time.Now().Before(slotAt) {
			b.Fatalf("loading %d jobs took past their slot %s; the machine is too loaded", n, slotAt)
		}
		time.Sleep(time.Until(slotAt.Add(-100 * time.Millisecond)))
		cpu0 := cpuTime()
		select {
		case <-done:
		case <-time.After(time.Until(slotAt) + time.Minute):
			b.Fatalf("only %d of %d jobs fired within a minute of their slot", got.Load(), n)
		}
		cpu = append(cpu, ms(cpuTime()-cpu0))
		stopEngine(b, e)
		if w := wrongSlot.Load(); w != 0 {
			b.Fatalf("%d fires reported a slot other than %s", w, slotAt)
		}
		p50 = append(p50, ms(pct(lat, 50)))
		p99 = append(p99, ms(pct(lat, 99)))
		pmax = append(pmax, ms(slices.Max(lat)))
	}
	b.ReportMetric(median(p50), "p50_ms")
	b.ReportMetric(median(p99), "p99_ms")
	b.ReportMetric(median(pmax), "max_ms")
	b.ReportMetric(median(cpu), "cpu_ms")
}

// cpuTime is the user+system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShards compares shard counts at 100,000 jobs (DefaultShards is
// 4096): sync_ms is one Sync into an empty running engine; reloadloop_ms
// loads the same jobs with one Reload each instead (no paused shards, no
// parse cache: what Sync did before they were added); changed_p50_ns and
// changed_p99_ns are single changed Reloads with all jobs armed;
// empty_engine_kb is the heap and stack of a started engine without jobs.
func BenchmarkShards(b *testing.B) {
	const n, edits = 100_000, 5000
	for _, shards := range []int{64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			items := benchItems(n)
			var syncMS, loopMS, p50, p99, idle []float64
			for range b.N {
				before := memInUse()
				e := benchEngine(Options{Shards: shards})
				idle = append(idle, float64(int64(memInUse())-int64(before))/1024)
				t0 := time.Now()
				syncItems(e, items)
				syncMS = append(syncMS, ms(time.Since(t0)))
				ds := make([]time.Duration, 0, edits)
				for i := range edits {
					s := items[(i*7919)%n].Schedule
					s.CronExpr = "30 3 * * *"
					t0 := time.Now()
					if o := e.Reload(s); o != Replaced {
						b.Fatalf("outcome %s, want replaced", o)
					}
					ds = append(ds, time.Since(t0))
				}
				p50, p99 = append(p50, float64(pct(ds, 50))), append(p99, float64(pct(ds, 99)))
				stopEngine(b, e)

				e = benchEngine(Options{Shards: shards})
				t0 = time.Now()
				for _, it := range items {
					e.Reload(it.Schedule)
				}
				loopMS = append(loopMS, ms(time.Since(t0)))
				if e.Len() != n {
					b.Fatalf("%d armed, want %d", e.Len(), n)
				}
				stopEngine(b, e)
				runtime.GC()
			}
			b.ReportMetric(median(syncMS), "sync_ms")
			b.ReportMetric(median(loopMS), "reloadloop_ms")
			b.ReportMetric(median(p50), "changed_p50_ns")
			b.ReportMetric(median(p99), "changed_p99_ns")
			b.ReportMetric(median(idle), "empty_engine_kb")
		})
	}
}

// memInUse is the live heap plus goroutine stacks after a collection.
func memInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// BenchmarkRearm is a re-division at a million jobs, by shard count: the
// engine holds 1,000,000 jobs and arms a third of them (as two armers of
// six members would), then Rearm arms a sixth more (a member died: its
// jobs' third armer is here now) and, later, disarms them again (a member
// joined). arm_cpu_s is the process CPU of the arming Rearm, disarm_cpu_s
// that of the disarming Rearm and the drain of the entries it retires
// (wait; at the drain's pace this is not the wall time), and
// empty_engine_kb the heap and stacks of a started engine without jobs.
// robfig sorts a running shard's entries on every add and remove, so both
// costs grow with the entries per shard.
func BenchmarkRearm(b *testing.B) {
	const n = 1_000_000
	const moved = (n + 3) / 6 // the jobs i with i%6 == 2
	items := benchItems(n)
	for _, shards := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			var armCPU, disarmCPU, idle []float64
			for range b.N {
				var sixths atomic.Int32
				sixths.Store(2)
				arms := func(id string) bool {
					i, _ := strconv.Atoi(id[len("job-"):]) // benchID
					return int32(i%6) < sixths.Load()
				}
				before := memInUse()
				e := benchEngine(Options{Shards: shards, Arms: arms})
				idle = append(idle, float64(int64(memInUse())-int64(before))/1024)
				syncItems(e, items)
				sixths.Store(3)
				c0 := cpuTime()
				if armed, _, _ := e.Rearm(nil); len(armed) != moved {
					b.Fatalf("Rearm armed %d, want %d", len(armed), moved)
				}
				armCPU = append(armCPU, (cpuTime() - c0).Seconds())
				sixths.Store(2)
				c0 = cpuTime()
				if _, _, disarmed := e.Rearm(nil); len(disarmed) != moved {
					b.Fatalf("Rearm disarmed %d, want %d", len(disarmed), moved)
				}
				e.retired.wait()
				disarmCPU = append(disarmCPU, (cpuTime() - c0).Seconds())
				stopEngine(b, e)
				runtime.GC()
			}
			b.ReportMetric(median(armCPU), "arm_cpu_s")
			b.ReportMetric(median(disarmCPU), "disarm_cpu_s")
			b.ReportMetric(median(idle), "empty_engine_kb")
		})
	}
}
