package main

// The kill/join phase of "bench divide" (divide_schedules on): a set of
// every-second jobs beside the N schedules, one replica SIGKILLed (or two
// together, -kill 2), later a replica joining; the run ledger (job_runs, and the action's own file)
// says whether every slot ran exactly once, how late the dead replica's
// jobs ran, and which slots were recorded missed and why.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
)

// hotJobID is the id of the k-th every-second job of the hand-over phase.
func hotJobID(k int) string { return fmt.Sprintf("hot%04d", k) }

// handoffTiming is the membership's timing the replicas run with: the
// flags, or the defaults where they are zero.
type handoffTiming struct{ heartbeat, lease, grace time.Duration }

func (o divideSettings) timing() handoffTiming {
	t := handoffTiming{heartbeat: o.heartbeat, lease: o.lease, grace: o.claimGrace}
	if t.heartbeat <= 0 {
		t.heartbeat = members.DefaultHeartbeat
	}
	if t.lease <= 0 {
		t.lease = members.DefaultLease
	}
	if t.grace <= 0 {
		t.grace = firepath.DefaultClaimGrace
	}
	return t
}

// bound is the design's bound on the first slot after a death: the lease,
// the claim grace and the re-division's second.
func (t handoffTiming) bound() time.Duration { return t.lease + t.grace + time.Second }

// membersConfig is the members section of the replicas' config ("" for
// the defaults).
func (o divideSettings) membersConfig() string {
	if o.heartbeat <= 0 && o.lease <= 0 && o.claimGrace <= 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("members:\n")
	for _, kv := range []struct {
		k string
		v time.Duration
	}{{"heartbeat", o.heartbeat}, {"lease", o.lease}, {"claim_grace", o.claimGrace}} {
		if kv.v > 0 {
			fmt.Fprintf(&b, "  %s: %s\n", kv.k, kv.v)
		}
	}
	return b.String()
}

// handoffResult is what the kill/join phase measured.
type handoffResult struct {
	hot, owned int           // every-second jobs; of them, owned by a killed replica
	orphaned   int           // of the owned, those whose two armers were both killed
	timing     handoffTiming // the replicas' membership timing
	victims    []string      // the killed replicas

	joiner       string
	killAt       time.Time
	joinAt       time.Time     // the joiner's process start
	joinReady    time.Duration // its start → /readyz
	joinerArmed  int64         // its cronswap_schedules_armed once the counts held still
	armedAfter   []int64       // every live replica's armed count then
	first        []firstAfter  // per owned job, its first slot after the death
	phases       []handoffPhase
	ledgerLines  int
	problems     []string
	loadAfter    string
	runsByMember map[string]int // runs of the hot jobs' slots in the window, per instance
	// serverPauses are the test server's stop-the-world pauses with every
	// replica up, after the death and after the join.
	serverPauses [3]pauseSummary
	// neither describes each slot neither run once nor recorded missed:
	// its run record (status, instance, reason) if any, and its ledger
	// lines.
	neither []string
}

// firstAfter is the first slot after the death of one job the killed
// replica owned.
type firstAfter struct {
	job              string
	slot             time.Time
	late, afterDeath time.Duration // started_at − slot, started_at − the kill
	by               string
	missed           string // the reason, when recorded missed instead
}

// handoffPhase counts the slots of one stretch of the phase.
type handoffPhase struct {
	name                       string
	slots, once, doubled, none int
	missed                     map[string]int // by reason
	late                       series         // started_at − scheduled_at of the slots that ran
}

// runHandoff runs the kill/join phase on the settled replicas ds (with
// their ids) of db: it adds o.hot every-second jobs, kills the first o.kill
// of ds together, starts a replica joining, and reads the ledger. The
// killed ones are nil in ds when it returns (their processes are gone);
// the joiner is returned for the caller to stop.
func runHandoff(ctx context.Context, o divideSettings, ws *workspace, uri string, db *mongo.Database,
	ds []*daemon, ids []string) (*handoffResult, *daemon, error) {
	res := &handoffResult{hot: o.hot, timing: o.timing(), victims: slices.Clone(ids[:o.kill]), runsByMember: map[string]int{}}
	// The replicas' first start writes every job's first sighting, in
	// batches, for minutes at a large N: the phase starts once no batch
	// has been written for 10 s, so that it measures the hand-over, not
	// that load on the test server.
	quiet := sightingsQuiet(ctx, ds, 10*time.Second, o.settle)
	logf("handoff: first sightings quiet after %s", quiet.Round(time.Second))
	ledger := filepath.Join(ws.tmp, "handoff-ledger.log")
	now := time.Now().UTC()
	var docs []any
	var hot []string
	for k := range o.hot {
		hot = append(hot, hotJobID(k))
		docs = append(docs, bson.D{{Key: "_id", Value: hotJobID(k)}, {Key: "cron_expr", Value: "* * * * * *"},
			{Key: "job", Value: "ledger"}, {Key: "updated_at", Value: now}})
	}
	if _, err := db.Collection("schedules").InsertMany(ctx, docs); err != nil {
		return nil, nil, fmt.Errorf("insert the every-second jobs: %w", err)
	}
	logf("handoff: %d every-second jobs added; waiting until each is armed by two replicas", o.hot)
	owners := map[string]string{}
	armers := map[string][]string{}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok := true
		for _, id := range hot {
			s, err := scheduleOf(ctx, ds[0], id)
			if err != nil || len(s.ArmedBy) != 2 {
				ok = false
				break
			}
			owners[id], armers[id] = s.Owner, s.ArmedBy
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("the every-second jobs were not each armed by two replicas within 2m")
		}
		time.Sleep(500 * time.Millisecond)
	}
	var owned []string
	for _, id := range hot {
		if slices.Contains(res.victims, owners[id]) {
			owned = append(owned, id)
			if !slices.ContainsFunc(armers[id], func(a string) bool { return !slices.Contains(res.victims, a) }) {
				res.orphaned++
			}
		}
	}
	res.owned = len(owned)
	// A baseline of o.before with every replica up, then the death.
	before := time.Now().Truncate(time.Second).Add(2 * time.Second)
	// Killed between two slots, so that no slot races the kill.
	time.Sleep(time.Until(before.Add(o.before).Add(400 * time.Millisecond)))
	res.killAt = time.Now()
	for i := range o.kill {
		if err := ds[i].cmd.Process.Kill(); err != nil {
			return nil, nil, fmt.Errorf("SIGKILL %s: %w", ids[i], err)
		}
	}
	for i := range o.kill {
		<-ds[i].done
		ds[i] = nil
	}
	logf("handoff: %s (owners of %d of the %d every-second jobs, %d of them armed by no other replica) SIGKILLed at %s",
		strings.Join(res.victims, " and "), len(owned), o.hot, res.orphaned, res.killAt.Format("15:04:05.000"))
	// The survivors see the lease pass (≤ lease after the last heartbeat)
	// and re-divide; then a replica joins.
	time.Sleep(time.Until(res.killAt.Add(res.timing.lease + res.timing.heartbeat + 5*time.Second)))
	res.joiner = strings.TrimSuffix(ids[0], "1") + fmt.Sprint(len(ids)+1)
	j, err := startDaemon(ctx, daemonSpec{
		binary: ws.binary, uri: uri, database: db.Name(), instanceID: res.joiner, mode: modeChangeStream,
		pollInterval: time.Second, pprof: true, divide: true, extra: o.membersConfig(), ledger: ledger,
		logPath: filepath.Join(ws.logDir, res.joiner+".log"),
	})
	if err != nil {
		return nil, nil, err
	}
	res.joinAt = j.started
	if res.joinReady, err = j.waitReady(ctx, readyLimit); err != nil {
		return nil, j, fmt.Errorf("%s: %w", res.joiner, err)
	}
	logf("handoff: %s joined, ready after %s", res.joiner, res.joinReady.Round(time.Millisecond))
	profiling := cpuProfiles(ctx, o.cpuProfiles, append(slices.Clone(ds[o.kill:]), j), append(slices.Clone(ids[o.kill:]), res.joiner))
	defer profiling.Wait()
	// The others see it at their next heartbeat; the armed counts then
	// hold still.
	live := append(slices.Clone(ds[o.kill:]), j)
	var last []int64
	since := time.Now()
	for start := time.Now(); time.Since(start) < o.settle; time.Sleep(time.Second) {
		cur := make([]int64, len(live))
		for i, d := range live {
			cur[i] = metricOf(ctx, d, "cronswap_schedules_armed")
		}
		if !equalCounts(cur, last) {
			last, since = cur, time.Now()
		} else if time.Since(since) >= max(o.stable, 2*res.timing.heartbeat) {
			break
		}
	}
	res.armedAfter, res.joinerArmed = last, last[len(last)-1]
	end := time.Now().Truncate(time.Second).Add(o.after)
	// The last slots are claimed by a non-owner only after the grace:
	// leave the jobs armed until then.
	time.Sleep(time.Until(end.Add(res.timing.grace + 3*time.Second)))
	// Slots in [before, end): wait until each has a record that ended.
	window := bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: hot}}},
		{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: before.Add(-time.Hour)}, {Key: "$lt", Value: end}}}}
	if _, err := db.Collection("schedules").DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: hot}}}}); err != nil {
		return nil, j, fmt.Errorf("delete the every-second jobs: %w", err)
	}
	time.Sleep(3 * time.Second) // the replicas disarm them before they are stopped
	// A slot not run is recorded missed once no replica can start it, and
	// a loaded database may hold that write back (its retries back off):
	// wait for a record of every slot too, up to the same minute.
	var runs []record.RunDoc
	for wait := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		runs, err = readRuns(ctx, db, window)
		if err != nil {
			return nil, j, err
		}
		if (busyRuns(runs) == 0 && unrecordedSlots(runs, hot, before, end) == 0) || time.Now().After(wait) {
			break
		}
	}
	lines, err := readLedger(ledger)
	if err != nil {
		return nil, j, err
	}
	for _, n := range lines {
		res.ledgerLines += n
	}
	res.account(runs, lines, hot, owned, before, end)
	if ps, err := readSafepoints(o.safepoints); err != nil {
		res.problems = append(res.problems, fmt.Sprintf("the test server's pauses not read: %v", err))
	} else {
		for i, w := range [][2]time.Time{{before, res.killAt}, {res.killAt, res.joinAt}, {res.joinAt, end}} {
			res.serverPauses[i] = summarisePauses(ps, w[0], w[1])
		}
	}
	res.loadAfter = loadAvg()
	return res, j, nil
}

// cpuProfileFor is how long each replica's CPU profile runs (-cpu-profiles).
const cpuProfileFor = 30 * time.Second

// cpuProfiles saves a CPU profile of each of ds (named names), taken over
// the next cpuProfileFor, as dir/cpu-<name>.pb.gz, in the background;
// nothing when dir is empty. Wait on the group before the daemons stop.
func cpuProfiles(ctx context.Context, dir string, ds []*daemon, names []string) *sync.WaitGroup {
	var wg sync.WaitGroup
	if dir == "" {
		return &wg
	}
	for i, d := range ds {
		wg.Go(func() {
			path := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(cpuProfileFor.Seconds()))
			prof, err := d.getWithin(ctx, path, cpuProfileFor+time.Minute)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "cpu-"+names[i]+".pb.gz"), prof, 0o644)
			}
			if err != nil {
				logf("handoff: CPU profile of %s: %v", names[i], err)
			}
		})
	}
	return &wg
}

// sightingsQuiet waits up to limit until some daemon of ds has written
// first sightings and none has for quiet; it returns how long it waited.
func sightingsQuiet(ctx context.Context, ds []*daemon, quiet, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		var last time.Time
		for _, d := range ds {
			d.mu.Lock()
			if d.lastSighted.After(last) {
				last = d.lastSighted
			}
			d.mu.Unlock()
		}
		if !last.IsZero() && time.Since(last) >= quiet {
			break
		}
		time.Sleep(time.Second)
	}
	return time.Since(start)
}

// scheduleOf is one job's entry in a daemon's /api/schedules.
func scheduleOf(ctx context.Context, d *daemon, id string) (struct {
	Owner   string   `json:"owner"`
	ArmedBy []string `json:"armed_by"`
}, error) {
	var s struct {
		Owner   string   `json:"owner"`
		ArmedBy []string `json:"armed_by"`
	}
	body, err := d.get(ctx, "/api/schedules/"+id)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(body, &s)
}

func readRuns(ctx context.Context, db *mongo.Database, filter bson.D) ([]record.RunDoc, error) {
	cur, err := db.Collection(record.RunsCollection).Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", record.RunsCollection, err)
	}
	var out []record.RunDoc
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read %s: %w", record.RunsCollection, err)
	}
	return out, nil
}

// slotKey is one (job, slot).
type slotKey struct {
	job  string
	slot int64 // Unix seconds
}

// readLedger counts the action's own lines per (job, slot).
func readLedger(path string) (map[slotKey]int, error) {
	out := map[slotKey]int{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		t, err := time.Parse(time.RFC3339, fs[1])
		if err != nil {
			continue
		}
		out[slotKey{fs[0], t.Unix()}]++
	}
	return out, sc.Err()
}

// busyRuns counts the records of runs still running or claiming.
func busyRuns(runs []record.RunDoc) int {
	n := 0
	for _, r := range runs {
		if r.Status == record.StatusRunning || r.Status == record.StatusClaiming {
			n++
		}
	}
	return n
}

// unrecordedSlots counts the slots of the every-second jobs hot in
// [before, end) that no record of runs names: neither a run's nor a missed
// range's.
func unrecordedSlots(runs []record.RunDoc, hot []string, before, end time.Time) int {
	recorded := map[slotKey]bool{}
	for _, r := range runs {
		last := r.ScheduledAt
		if r.Status == record.StatusMissed && r.LastScheduledAt.After(last) {
			last = r.LastScheduledAt
		}
		for t := r.ScheduledAt; !t.After(last); t = t.Add(time.Second) {
			recorded[slotKey{r.JobID, t.Unix()}] = true
		}
	}
	n := 0
	for _, id := range hot {
		for t := before; t.Before(end); t = t.Add(time.Second) {
			if !recorded[slotKey{id, t.Unix()}] {
				n++
			}
		}
	}
	return n
}

// account sorts every (job, slot) of [before, end) into the phases: all
// replicas up (before the kill), the death (the kill → the join) and the
// join (the join → end), the death split between the killed replica's
// jobs and the others.
func (res *handoffResult) account(runs []record.RunDoc, lines map[slotKey]int, hot, owned []string, before, end time.Time) {
	ran := map[slotKey]record.RunDoc{}
	missed := map[slotKey]string{}
	for _, r := range runs {
		if r.Status == record.StatusMissed {
			last := r.LastScheduledAt
			if last.IsZero() {
				last = r.ScheduledAt
			}
			for t := r.ScheduledAt; !t.After(last); t = t.Add(time.Second) {
				missed[slotKey{r.JobID, t.Unix()}] = r.Reason
			}
			continue
		}
		k := slotKey{r.JobID, r.ScheduledAt.Unix()}
		ran[k] = r
		if !r.ScheduledAt.Before(before) && r.ScheduledAt.Before(end) {
			res.runsByMember[r.Instance]++
		}
	}
	isOwned := map[string]bool{}
	for _, id := range owned {
		isOwned[id] = true
	}
	kill := res.killAt
	theKilled := "the killed replica's jobs"
	if len(res.victims) > 1 {
		theKilled = "the killed replicas' jobs"
	}
	phases := []*handoffPhase{
		{name: "all up, " + theKilled}, {name: "all up, the other jobs"},
		{name: "after the death, " + theKilled}, {name: "after the death, the other jobs"},
		{name: "after the join, every job"},
	}
	lates := make([][]time.Duration, len(phases))
	for _, p := range phases {
		p.missed = map[string]int{}
	}
	for _, id := range hot {
		var first *firstAfter
		for t := before; t.Before(end); t = t.Add(time.Second) {
			var i int
			switch {
			case !t.After(kill):
				i = 0
			case t.Before(res.joinAt):
				i = 2
			default:
				i = 4
			}
			if i < 4 && !isOwned[id] {
				i++
			}
			p := phases[i]
			k := slotKey{id, t.Unix()}
			r, hasRun := ran[k]
			n := lines[k]
			p.slots++
			switch {
			case hasRun && (n == 1 || (n == 0 && r.Status == record.StatusAbandoned && slices.Contains(res.victims, r.Instance))):
				p.once++
			case n > 1:
				p.doubled++
			case missed[k] != "":
				p.missed[missed[k]]++
			default:
				p.none++
				what := "no record in job_runs"
				if hasRun {
					what = fmt.Sprintf("job_runs status %s by %s (reason %q, error %q)", r.Status, r.Instance, r.Reason, r.Error)
				}
				res.neither = append(res.neither, fmt.Sprintf("%s %s: %s; %d ledger lines",
					id, t.UTC().Format("15:04:05"), what, n))
			}
			if hasRun {
				lates[i] = append(lates[i], r.StartedAt.Sub(r.ScheduledAt))
			}
			if isOwned[id] && t.After(kill) && first == nil {
				first = &firstAfter{job: id, slot: t, missed: missed[k]}
				if hasRun {
					first.late, first.afterDeath, first.by = r.StartedAt.Sub(t), r.StartedAt.Sub(kill), r.Instance
				}
			}
		}
		if first != nil {
			res.first = append(res.first, *first)
		}
	}
	for i, p := range phases {
		p.late = newSeries(p.name, lates[i], 0)
		res.phases = append(res.phases, *p)
	}
}

// handoffTable is the report of the kill/join phase.
func handoffTable(res *handoffResult) string {
	var b strings.Builder
	t := res.timing
	fmt.Fprintf(&b, "\nkill/join (divide_schedules true): %d every-second jobs (action: a line appended to a file) beside the N; "+
		"membership heartbeat %s, lease %s, claim grace %s; %s SIGKILLed at %s owning %d of them (%d armed by no other replica); %s started %s after the kill, ready in %s\n",
		res.hot, t.heartbeat, t.lease, t.grace, strings.Join(res.victims, " and "), res.killAt.UTC().Format("15:04:05.000"), res.owned, res.orphaned,
		res.joiner, res.joinAt.Sub(res.killAt).Round(100*time.Millisecond), res.joinReady.Round(100*time.Millisecond))
	var worst firstAfter
	bad := 0
	for _, f := range res.first {
		if f.by == "" || f.late > t.bound() {
			bad++
		}
		if f.afterDeath > worst.afterDeath {
			worst = f
		}
	}
	lateS := make([]time.Duration, 0, len(res.first))
	for _, f := range res.first {
		if f.by != "" {
			lateS = append(lateS, f.late)
		}
	}
	fs := newSeries("first", lateS, 0)
	fmt.Fprintf(&b, "first slot after the death of each of the %d jobs: lateness (started_at − slot) p50 %s, max %s ms; "+
		"latest start after the kill %.2f s (%s at %s, by %s); bound lease + grace + 1 s = %s: %d over it or not run\n",
		len(res.first), fmtMS(fs.pct(50)), fmtMS(fs.pct(100)), worst.afterDeath.Seconds(), worst.job,
		worst.slot.UTC().Format("15:04:05"), worst.by, t.bound(), bad)
	b.WriteString("\n| slots | count | exactly once | doubled | missed (reason) | neither run nor missed | lateness p50 | p99 | max |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range res.phases {
		var ms []string
		for _, r := range slices.Sorted(maps.Keys(p.missed)) {
			ms = append(ms, fmt.Sprintf("%d %s", p.missed[r], r))
		}
		if len(ms) == 0 {
			ms = []string{"0"}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %s ms | %s ms | %s ms |\n", p.name, p.slots, p.once, p.doubled,
			strings.Join(ms, ", "), p.none, fmtMS(p.late.pct(50)), fmtMS(p.late.pct(99)), fmtMS(p.late.pct(100)))
	}
	fmt.Fprintf(&b, "\njoin: %s arms %d schedules once the counts held still (the live replicas: %v); runs of the window per instance %v; %d ledger lines; load average after %s\n",
		res.joiner, res.joinerArmed, res.armedAfter, res.runsByMember, res.ledgerLines, res.loadAfter)
	fmt.Fprintf(&b, "test server stop-the-world (its safepoint log): all up %s; after the death %s; after the join %s\n",
		res.serverPauses[0], res.serverPauses[1], res.serverPauses[2])
	for _, n := range firstN(res.neither, 20) {
		fmt.Fprintf(&b, "  neither run once nor recorded missed: %s\n", n)
	}
	for _, p := range firstN(res.problems, 5) {
		fmt.Fprintf(&b, "  problem: %s\n", p)
	}
	return b.String()
}
