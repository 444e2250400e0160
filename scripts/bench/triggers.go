package main

// The triggers benchmark ("bench triggers", scripts/bench-triggers.sh): a
// flood of run-now or backfill requests inserted at once across R daemon
// replicas. For each mode it starts a fresh test server, a recording HTTP
// sink on loopback (the action's ledger: one entry per run, with its run
// id), one counting wire proxy per replica and R daemon processes whose
// http action posts to the sink; loads the jobs; inserts the requests (with
// a few malformed ones) in one unordered insertMany; and waits until every
// request has a final status (or -timeout). It prints, per mode: the time
// until every request had its final status (and the distribution of each
// request's), the requests per status, the ledger against the statuses
// (distinct runs against succeeded, requests that ran but say otherwise
// and the reverse, duplicates), the malformed requests rejected, the run
// records database_unreachable, missed and abandoned, the connection
// checkout timeouts in the daemons' logs and the commands per request.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Modes of the triggers benchmark.
const (
	trigModeRunNow   = "run-now"
	trigModeBackfill = "backfill"
)

// triggersSettings are the triggers benchmark's command-line settings.
type triggersSettings struct {
	n            int
	jobs         int
	backfillJobs int
	replicas     int
	malformed    bool
	pool         int
	modes        []string
	timeout      time.Duration
	binary       string
	logDir       string
	out          string
	label        string
}

func triggersMain(args []string) int {
	var (
		o     triggersSettings
		modes string
	)
	fs := flag.NewFlagSet("bench triggers", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 5000, "requests inserted at once per mode")
	fs.IntVar(&o.jobs, "jobs", 50, "run-now mode: jobs the requests are spread over (overlap allow: a job's runs go side by side)")
	fs.IntVar(&o.backfillJobs, "backfill-jobs", 500, "backfill mode: jobs whose past slots are backfilled (n / backfill-jobs slots each, paused jobs firing every minute)")
	fs.IntVar(&o.replicas, "replicas", 3, "daemon replicas")
	fs.BoolVar(&o.malformed, "malformed", true, "insert 5 malformed requests among the others")
	fs.IntVar(&o.pool, "pool", 0, "maxPoolSize of each daemon's connection string (0: the driver's default, 100)")
	fs.StringVar(&modes, "modes", trigModeRunNow+","+trigModeBackfill, "modes, comma-separated: run-now, backfill")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "per mode: how long after the insert the final statuses are waited for")
	fs.StringVar(&o.binary, "binary", "", "cronswap binary to run (default: go build into a temporary directory)")
	fs.StringVar(&o.logDir, "logs", "", "keep the daemons' logs and configs in this directory (default: a temporary one, removed)")
	fs.StringVar(&o.out, "out", "docs", "directory for bench-triggers-results.txt (appended; '' writes none)")
	fs.StringVar(&o.label, "label", "", "free text recorded with the run (e.g. before, after)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, m := range strings.Split(modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case trigModeRunNow, trigModeBackfill:
			o.modes = append(o.modes, m)
		case "":
		default:
			fmt.Fprintf(os.Stderr, "bench triggers: -modes: %q is not run-now or backfill\n", m)
			return 2
		}
	}
	if o.n < 1 || o.jobs < 1 || o.backfillJobs < 1 || o.replicas < 1 || o.pool < 0 || o.timeout <= 0 || len(o.modes) == 0 {
		fmt.Fprintln(os.Stderr, "bench triggers: -n, -jobs, -backfill-jobs, -replicas and -timeout must be positive, -pool not negative, -modes not empty")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runTriggers(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench triggers:", err)
		return 1
	}
	return 0
}

// triggersResult is what one mode measured.
type triggersResult struct {
	mode              string
	n, jobs, replicas int
	pool              int
	malformedN        int
	started           time.Time
	loadBefore        string
	loadAfter         string
	insertTook        time.Duration
	// allFinal is insert → the last request's final status; 0 when some
	// had none at the timeout.
	allFinal time.Duration
	// final holds each request's insert → final status (its updated_at).
	final []time.Duration
	// statuses counts the valid requests per status ("" pending);
	// malformedStatuses the malformed ones.
	statuses, malformedStatuses map[string]int
	// The ledger: action runs, distinct run ids, and run ids of no valid
	// request.
	runs, distinct, duplicates, strays int
	// ranNotSucceeded: requests that ran (ledger) but say otherwise;
	// succeededNotRan: requests that say succeeded with no run in the
	// ledger.
	ranNotSucceeded, succeededNotRan int
	// mismatches are the first few of those, for the report.
	mismatches []string
	// Run records.
	unreachable, missed, abandoned int64
	// poolTimeouts counts log records about a connection checkout that
	// timed out.
	poolTimeouts int
	commands     int
	problems     []string
}

func runTriggers(ctx context.Context, o triggersSettings) error {
	ws, err := newWorkspace(ctx, "cronswap-bench-triggers-", o.logDir, o.binary)
	if err != nil {
		return err
	}
	defer ws.remove()
	o.binary = ws.binary
	env := describeMachine(ctx)
	var results []*triggersResult
	var firstErr error
	for _, mode := range o.modes {
		if ctx.Err() != nil {
			break
		}
		logf("=== triggers %s: %d requests, %d replica(s)", mode, o.n, o.replicas)
		r, err := runTriggersMode(ctx, o, mode, ws.logDir)
		if err != nil {
			logf("%s: %v", mode, err)
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", mode, err)
			}
		}
		if r != nil {
			results = append(results, r)
			fmt.Print(r.text())
		}
	}
	if o.out != "" && len(results) > 0 {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "=== triggers run %s, label %q, binary %s\n", time.Now().UTC().Format(time.RFC3339), o.label, o.binary)
		fmt.Fprintf(&b, "machine: %d CPUs (%s), %s, Go %s, %s; load before %s, after %s\n", env.cpus, env.cpuModel, env.memTotal,
			env.goVersion, env.java, env.loadBefore, loadAvg())
		for _, r := range results {
			b.WriteString(r.text())
		}
		path := filepath.Join(o.out, "bench-triggers-results.txt")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, werr := f.WriteString(b.String())
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		logf("appended to %s", path)
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// trigJobID names job k of a mode.
func trigJobID(mode string, k int) string {
	return fmt.Sprintf("%s-%04d", strings.ReplaceAll(mode, "-", ""), k)
}

func runTriggersMode(ctx context.Context, o triggersSettings, mode, logDir string) (*triggersResult, error) {
	jobsN := o.jobs
	if mode == trigModeBackfill {
		jobsN = o.backfillJobs
	}
	r := &triggersResult{mode: mode, n: o.n, jobs: jobsN, replicas: o.replicas, pool: o.pool, started: time.Now().UTC(), loadBefore: loadAvg()}
	srv, err := testmongo.Start(ctx, testmongo.Options{StartTimeout: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop() }()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(testmongo.DatabaseName("bench_triggers_" + strings.ReplaceAll(mode, "-", "_")))
	sk, err := startSink(0, false)
	if err != nil {
		return nil, err
	}
	defer sk.close()

	// The jobs: never due (run-now), or paused every minute (backfill:
	// the daemons fire none of their slots themselves).
	now := time.Now().UTC()
	var docs []any
	for k := range jobsN {
		d := bson.D{{Key: schedule.FieldID, Value: trigJobID(mode, k)}, {Key: schedule.FieldJob, Value: fireAction},
			{Key: schedule.FieldUpdatedAt, Value: now}}
		if mode == trigModeBackfill {
			d = append(d, bson.E{Key: schedule.FieldCronExpr, Value: "0 * * * * *"}, bson.E{Key: schedule.FieldEnabled, Value: false})
		} else {
			d = append(d, bson.E{Key: schedule.FieldCronExpr, Value: "0 0 3 1 1 *"})
		}
		docs = append(docs, d)
	}
	if _, err := db.Collection(schedule.CollectionName).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		return nil, fmt.Errorf("load %d jobs: %w", jobsN, err)
	}

	uri := srv.URI
	if o.pool > 0 {
		sep := "?"
		if strings.Contains(uri, "?") {
			sep = "&"
		}
		uri += sep + fmt.Sprintf("maxPoolSize=%d", o.pool)
	}
	fo := fireSettings{binary: o.binary, overlap: string(jobs.OverlapAllow)}
	cl, err := startFireCluster(ctx, fo, uri, db.Name(), sk.URL(), o.replicas, nil, logDir, mode)
	defer func() {
		if cl != nil {
			r.problems = append(r.problems, cl.stop()...)
			for _, path := range cl.logs {
				r.poolTimeouts += countLogLines(path, "checking out a connection")
			}
		}
		r.loadAfter = loadAvg()
	}()
	if err != nil {
		return r, err
	}
	armed := jobsN
	if mode == trigModeBackfill {
		armed = 0
	}
	if err := cl.waitArmed(ctx, armed); err != nil {
		return r, err
	}
	for _, path := range cl.logs {
		if err := waitLogLine(ctx, path, readyLimit, `"msg":"change stream opened`, `/triggers"`); err != nil {
			return r, err
		}
	}

	valid, malformed := trigRequests(mode, o.n, jobsN, o.malformed, time.Now().UTC())
	r.malformedN = len(malformed)
	// Malformed requests spread among the others.
	all := make([]any, 0, len(valid)+len(malformed))
	step, mi := len(valid)/(len(malformed)+1), 0
	for i, v := range valid {
		if mi < len(malformed) && i == (mi+1)*step {
			all = append(all, malformed[mi])
			mi++
		}
		all = append(all, v)
	}
	all = append(all, malformed[mi:]...)
	coll := db.Collection(triggers.CollectionName)
	cmd0 := cl.commands()
	insertAt := time.Now()
	if _, err := coll.InsertMany(ctx, all, options.InsertMany().SetOrdered(mode == trigModeBackfill)); err != nil {
		return r, fmt.Errorf("insert %d requests: %w", len(all), err)
	}
	r.insertTook = time.Since(insertAt)
	logf("inserted %d requests in %s", len(all), r.insertTook.Round(time.Millisecond))

	deadline := insertAt.Add(o.timeout)
	lastLog := time.Now()
	for {
		open, err := coll.CountDocuments(ctx, bson.D{{Key: triggers.FieldStatus, Value: bson.D{{Key: "$in", Value: bson.A{nil, triggers.StatusRunning, triggers.StatusBuffered}}}}})
		if err != nil {
			return r, err
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			logf("%d requests without a final status %s after the insert", open, o.timeout)
			break
		}
		if err := cl.exited(); err != nil {
			return r, err
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("%d requests without a final status after %s", open, time.Since(insertAt).Round(time.Second))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	// A late or duplicate run would reach the sink soon after; give it
	// time before accounting.
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(3 * time.Second):
	}
	r.commands = sumCommands(commandDelta(cmd0, cl.commands()))
	return r, r.account(ctx, db, insertAt, valid, malformed, sk)
}

// trigRequests builds the requests of mode: n valid ones over jobs (run
// now: ObjectIds, half with one requested_at as a script writes them;
// backfill: the last n/jobs minutes of each job, oldest first, as the CLI
// writes them) and, when asked, 5 malformed ones.
func trigRequests(mode string, n, jobsN int, malformed bool, now time.Time) (valid, bad []any) {
	switch mode {
	case trigModeRunNow:
		for k := range n {
			d := bson.D{{Key: triggers.FieldID, Value: bson.NewObjectID()}, {Key: triggers.FieldJobID, Value: trigJobID(mode, k%jobsN)}}
			if k%2 == 0 {
				d = append(d, bson.E{Key: triggers.FieldRequestedAt, Value: now})
			}
			valid = append(valid, d)
		}
	case trigModeBackfill:
		perJob := (n + jobsN - 1) / jobsN
		last := now.Truncate(time.Minute).Add(-time.Minute)
		for s := range perJob {
			slot := last.Add(time.Duration(s-perJob+1) * time.Minute)
			for j := range jobsN {
				if len(valid) == n {
					break
				}
				job := trigJobID(mode, j)
				// The jobs were loaded just now: their past slots are
				// before their first sighting, which a request must say.
				valid = append(valid, bson.D{{Key: triggers.FieldID, Value: triggers.BackfillIDPrefix + record.RunID(job, slot)},
					{Key: triggers.FieldJobID, Value: job}, {Key: triggers.FieldSlot, Value: slot}, {Key: triggers.FieldRequestedAt, Value: now},
					{Key: triggers.FieldBeforeFirstSeen, Value: true}})
			}
		}
	}
	if !malformed {
		return valid, nil
	}
	job := trigJobID(mode, 0)
	bad = []any{
		bson.D{{Key: triggers.FieldID, Value: 1}, {Key: triggers.FieldJobID, Value: job}},
		bson.D{{Key: triggers.FieldID, Value: 2}, {Key: triggers.FieldJobID, Value: job}},
		bson.D{{Key: triggers.FieldID, Value: "bad-status"}, {Key: triggers.FieldJobID, Value: job}, {Key: triggers.FieldStatus, Value: 7}},
		bson.D{{Key: triggers.FieldID, Value: "bad-job"}, {Key: triggers.FieldJobID, Value: 42}},
		bson.D{{Key: triggers.FieldID, Value: "bad-slot"}, {Key: triggers.FieldJobID, Value: job}, {Key: triggers.FieldSlot, Value: now.Truncate(time.Minute).Add(-90 * time.Second)}},
	}
	return valid, bad
}

// trigRunID is the run id of valid request d.
func trigRunID(d bson.D) string {
	for _, e := range d {
		if e.Key == triggers.FieldSlot {
			return record.RunID(d[1].Value.(string), e.Value.(time.Time))
		}
	}
	return triggers.RunIDOf(d[0].Value.(bson.ObjectID).Hex())
}

// account reads the requests, the run records and the sink's ledger.
func (r *triggersResult) account(ctx context.Context, db *mongo.Database, insertAt time.Time, valid, malformed []any, sk *sink) error {
	coll := db.Collection(triggers.CollectionName)
	read := func(ids []any) (map[string]bson.Raw, error) {
		out := map[string]bson.Raw{}
		cur, err := coll.Find(ctx, bson.D{{Key: triggers.FieldID, Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return nil, err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			out[cur.Current.Lookup(triggers.FieldID).String()] = append(bson.Raw(nil), cur.Current...)
		}
		return out, cur.Err()
	}
	idOf := func(d any) (any, string) {
		id := d.(bson.D)[0].Value
		typ, v, _ := bson.MarshalValue(id)
		return id, bson.RawValue{Type: typ, Value: v}.String()
	}
	var validIDs, badIDs []any
	for _, d := range valid {
		id, _ := idOf(d)
		validIDs = append(validIDs, id)
	}
	for _, d := range malformed {
		id, _ := idOf(d)
		badIDs = append(badIDs, id)
	}
	docs, err := read(validIDs)
	if err != nil {
		return err
	}
	badDocs, err := read(badIDs)
	if err != nil {
		return err
	}
	arrivals, _ := sk.snapshot()
	byRun := map[string]int{}
	for _, a := range arrivals {
		byRun[a.runID]++
	}
	r.runs, r.distinct = len(arrivals), len(byRun)
	for _, k := range byRun {
		r.duplicates += k - 1
	}
	r.statuses, r.malformedStatuses = map[string]int{}, map[string]int{}
	known := map[string]bool{}
	var last time.Duration
	allFinal := true
	for _, d := range valid {
		_, key := idOf(d)
		runID := trigRunID(d.(bson.D))
		known[runID] = true
		doc := docs[key]
		status, _ := doc.Lookup(triggers.FieldStatus).StringValueOK()
		r.statuses[status]++
		if triggers.Final(status) {
			if at, ok := doc.Lookup(triggers.FieldUpdatedAt).TimeOK(); ok {
				took := at.Sub(insertAt)
				r.final = append(r.final, took)
				last = max(last, took)
			}
		} else {
			allFinal = false
		}
		ran := byRun[runID] > 0
		switch {
		case ran && status != record.StatusSucceeded:
			r.ranNotSucceeded++
			if len(r.mismatches) < 5 {
				e, _ := doc.Lookup(triggers.FieldError).StringValueOK()
				r.mismatches = append(r.mismatches, fmt.Sprintf("%s ran, says %q (%s)", runID, status, e))
			}
		case !ran && status == record.StatusSucceeded:
			r.succeededNotRan++
			if len(r.mismatches) < 5 {
				r.mismatches = append(r.mismatches, fmt.Sprintf("%s did not run, says succeeded", runID))
			}
		}
	}
	if allFinal {
		r.allFinal = last
	}
	for runID := range byRun {
		if !known[runID] {
			r.strays++
		}
	}
	for _, d := range malformed {
		_, key := idOf(d)
		status, _ := badDocs[key].Lookup(triggers.FieldStatus).StringValueOK()
		r.malformedStatuses[status]++
	}
	runs := db.Collection(record.RunsCollection)
	count := func(filter bson.D) (int64, error) { return runs.CountDocuments(ctx, filter) }
	if r.unreachable, err = count(bson.D{{Key: "reason", Value: record.MissedUnreachable}}); err != nil {
		return err
	}
	if r.missed, err = count(bson.D{{Key: "status", Value: record.StatusMissed}}); err != nil {
		return err
	}
	r.abandoned, err = count(bson.D{{Key: "status", Value: record.StatusAbandoned}})
	return err
}

// statusList renders counts by status, largest first ("pending" for "").
func statusList(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		name := k
		if name == "" {
			name = "pending"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (r *triggersResult) text() string {
	var b strings.Builder
	pool := "driver default (100)"
	if r.pool > 0 {
		pool = fmt.Sprint(r.pool)
	}
	fmt.Fprintf(&b, "--- triggers %s, %s: %d requests over %d jobs (+%d malformed), %d replicas, pool %s; load %s → %s\n",
		r.mode, r.started.Format(time.RFC3339), r.n, r.jobs, r.malformedN, r.replicas, pool, r.loadBefore, r.loadAfter)
	all := "NOT ALL (see pending)"
	if r.allFinal > 0 {
		all = r.allFinal.Round(10 * time.Millisecond).String()
	}
	final := newSeries("final status", r.final, 0)
	fmt.Fprintf(&b, "  inserted in %s; every request final after: %s; per request p50 %.2fs p99 %.2fs max %.2fs\n",
		r.insertTook.Round(time.Millisecond), all, final.pct(50)/1000, final.pct(99)/1000, final.pct(100)/1000)
	fmt.Fprintf(&b, "  statuses: %s\n", statusList(r.statuses))
	agree := "yes"
	if r.ranNotSucceeded > 0 || r.succeededNotRan > 0 || r.distinct != r.statuses[record.StatusSucceeded] {
		agree = "NO"
	}
	fmt.Fprintf(&b, "  ledger: %d runs, %d distinct, %d duplicates, %d of no request; succeeded %d; agree %s (ran but say otherwise %d, say succeeded but did not run %d)\n",
		r.runs, r.distinct, r.duplicates, r.strays, r.statuses[record.StatusSucceeded], agree, r.ranNotSucceeded, r.succeededNotRan)
	for _, m := range r.mismatches {
		fmt.Fprintf(&b, "    e.g. %s\n", m)
	}
	if r.malformedN > 0 {
		fmt.Fprintf(&b, "  malformed: %s\n", statusList(r.malformedStatuses))
	}
	fmt.Fprintf(&b, "  run records: database_unreachable %d, missed %d, abandoned %d; connection checkout timeouts logged %d; commands %d (%.1f per request)\n",
		r.unreachable, r.missed, r.abandoned, r.poolTimeouts, r.commands, float64(r.commands)/float64(r.n+r.malformedN))
	for _, p := range r.problems {
		fmt.Fprintf(&b, "  log: %s\n", p)
	}
	return b.String()
}

// sumCommands adds up a command-count map.
func sumCommands(m map[string]int) int {
	n := 0
	for _, k := range m {
		n += k
	}
	return n
}

// countLogLines counts the lines of the file at path that contain sub.
func countLogLines(path, sub string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			n++
		}
	}
	return n
}

// waitLogLine waits until the log at path has a line containing every one
// of subs.
func waitLogLine(ctx context.Context, path string, limit time.Duration, subs ...string) error {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				ok := true
				for _, s := range subs {
					ok = ok && strings.Contains(line, s)
				}
				if ok {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New(path + ": no log line with " + strings.Join(subs, " and "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
