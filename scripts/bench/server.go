package main

// The test server micro-benchmark ("bench server", scripts/bench-server.sh):
// two builds of the test server (e.g. main's jar and this tree's) started
// side by side, each loaded with the same -docs run records and the
// daemon's job_runs indexes, a change stream open on the schedules
// collection (as every daemon has), then -rounds rounds in which each
// server in turn gets the same operations: a bulk write of -bulk
// conditional updates by _id, an insertMany of -bulk records, -finds finds
// by job_id and -finds finds by (job_id, scheduled_at range) sorted. It
// prints each operation's distribution per server and the ratio of the
// medians. The servers alternate within every round, so both see the
// same machine load.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// defaultServerHeap is the -Xmx the scale and divide modes give the test
// server: at 6g a million schedules, their first sightings and the oplog
// keep its collector marking without end and the daemon's reads wait on
// it (docs/BENCHMARKS.md, nineteen cold starts); 12g is the heap the
// first trial of that size had.
const defaultServerHeap = "12g"

// serverHeapUsage is the help of the modes' -server-heap.
const serverHeapUsage = "the test server's -Xmx"

// serverSettings are the server micro-benchmark's command-line settings.
type serverSettings struct {
	jars   []string
	labels []string
	// jvmArgs are each server's extra JVM options (index = -jars index).
	jvmArgs [][]string
	docs    int
	jobs    int
	rounds  int
	bulk    int
	finds   int
	// fullReads are the reads of the whole collection per round, as a
	// daemon's full read (batches of changestream.SnapshotBatchSize).
	fullReads int
}

// serverTarget is one test server under measurement.
type serverTarget struct {
	label  string
	srv    *testmongo.Server
	client *mongo.Client
	runs   *mongo.Collection
	// samples are the measured durations by operation name; for bulk
	// operations one sample per document (the bulk's time / -bulk).
	samples map[string][]time.Duration
	stop    context.CancelFunc
}

// serverOps are the measured operations in report order.
var serverOps = []string{"bulk update by _id (per doc)", "insertMany (per doc)", "find by job_id", "find by job_id + scheduled_at range",
	"full read: first batch", "full read: all documents"}

func serverMain(args []string) int {
	fs := flag.NewFlagSet("bench server", flag.ContinueOnError)
	var o serverSettings
	var jars, labels, jvm string
	fs.StringVar(&jars, "jars", "", "comma-separated mongo-server.jar paths to compare (default: this tree's jar)")
	fs.StringVar(&labels, "labels", "", "comma-separated labels of -jars (default: before,after for two jars)")
	fs.StringVar(&jvm, "jvm-args", "", "semicolon-separated extra JVM options per jar, each space-separated (e.g. ';-XX:TieredStopAtLevel=4')")
	fs.IntVar(&o.docs, "docs", 100000, "run records loaded into job_runs before measuring")
	fs.IntVar(&o.jobs, "jobs", 10000, "distinct job ids among the records")
	fs.IntVar(&o.rounds, "rounds", 5, "measured rounds (one uncounted warm-up round first)")
	fs.IntVar(&o.bulk, "bulk", 1000, "documents per bulk update and per insertMany")
	fs.IntVar(&o.finds, "finds", 100, "finds of each kind per round")
	fs.IntVar(&o.fullReads, "full-reads", 1, "reads of the whole collection per round, as a daemon's full read (0: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if jars == "" {
		p, err := testmongo.JarPath()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench server:", err)
			return 2
		}
		jars = p
	}
	o.jars = strings.Split(jars, ",")
	switch {
	case labels != "":
		o.labels = strings.Split(labels, ",")
	case len(o.jars) == 2:
		o.labels = []string{"before", "after"}
	default:
		for i := range o.jars {
			o.labels = append(o.labels, fmt.Sprintf("jar%d", i+1))
		}
	}
	o.jvmArgs = make([][]string, len(o.jars))
	if jvm != "" {
		for i, a := range strings.Split(jvm, ";") {
			if i < len(o.jvmArgs) {
				o.jvmArgs[i] = strings.Fields(a)
			}
		}
	}
	if len(o.labels) != len(o.jars) || o.docs < o.jobs || o.jobs < 1 || o.rounds < 1 || o.bulk < 1 || o.finds < 1 || o.fullReads < 0 {
		fmt.Fprintln(os.Stderr, "bench server: -labels must match -jars; -docs ≥ -jobs ≥ 1; -rounds, -bulk, -finds ≥ 1; -full-reads ≥ 0")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := runServerBench(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		return 1
	}
	return 0
}

func runServerBench(ctx context.Context, o serverSettings) error {
	fmt.Printf("load average before: %s\n", loadAvg())
	var targets []*serverTarget
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for i, jar := range o.jars {
		t, err := startServerTarget(ctx, o, o.labels[i], jar, o.jvmArgs[i])
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for round := 0; round <= o.rounds; round++ {
		for _, t := range targets {
			if err := t.round(ctx, o, round, base); err != nil {
				return fmt.Errorf("%s round %d: %w", t.label, round, err)
			}
		}
	}
	fmt.Printf("load average after: %s\n", loadAvg())
	fmt.Printf("%d records (%d jobs) in job_runs, %d rounds, bulk %d, %d finds of each kind a round\n",
		o.docs, o.jobs, o.rounds, o.bulk, o.finds)
	for _, op := range serverOps {
		if len(targets[0].samples[op]) == 0 {
			continue // -full-reads 0
		}
		fmt.Printf("\n%s\n", op)
		var medians []time.Duration
		for _, t := range targets {
			s := t.samples[op]
			slices.Sort(s)
			fmt.Printf("  %-8s n=%-6d p50 %-10v p90 %-10v p99 %-10v max %v\n", t.label, len(s),
				quantileOf(s, 0.5), quantileOf(s, 0.9), quantileOf(s, 0.99), s[len(s)-1])
			medians = append(medians, quantileOf(s, 0.5))
		}
		for i := 1; i < len(medians); i++ {
			if medians[i] > 0 {
				fmt.Printf("  p50 %s / %s = %.1f×\n", targets[0].label, targets[i].label,
					float64(medians[0])/float64(medians[i]))
			}
		}
	}
	return nil
}

// quantileOf returns the q-quantile of sorted s (nearest rank).
func quantileOf(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func startServerTarget(ctx context.Context, o serverSettings, label, jar string, jvmArgs []string) (*serverTarget, error) {
	srv, err := testmongo.Start(ctx, testmongo.Options{Jar: jar, JVMArgs: jvmArgs, IgnoreEnv: true, StartTimeout: 2 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	t := &serverTarget{label: label, srv: srv, samples: map[string][]time.Duration{}}
	if t.client, err = testmongo.Connect(ctx, srv.URI); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	db := t.client.Database("bench_server")
	t.runs = db.Collection(record.RunsCollection)
	if err := record.EnsureIndexes(ctx, t.runs); err != nil {
		t.close()
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	start := time.Now()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for from := 0; from < o.docs; from += 1000 {
		var docs []any
		for i := from; i < min(from+1000, o.docs); i++ {
			docs = append(docs, runRecord(o, i, base, "succeeded"))
		}
		if _, err := t.runs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
			t.close()
			return nil, fmt.Errorf("%s: load: %w", label, err)
		}
	}
	fmt.Printf("%s: %s %v, %d records loaded in %v\n", label, jar, jvmArgs, o.docs, time.Since(start).Round(time.Millisecond))
	// A daemon's change stream: every write wakes its getMore.
	wctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	cs, err := db.Collection("schedules").Watch(ctx, mongo.Pipeline{},
		options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(time.Second))
	if err != nil {
		t.close()
		return nil, fmt.Errorf("%s: watch: %w", label, err)
	}
	go func() {
		defer func() { _ = cs.Close(context.Background()) }()
		for cs.Next(wctx) {
		}
	}()
	return t, nil
}

// runRecord is record i: job i mod jobs, its slot i / jobs half a minute
// apart.
func runRecord(o serverSettings, i int, base time.Time, status string) bson.D {
	job := fmt.Sprintf("job-%06d", i%o.jobs)
	slot := base.Add(time.Duration(i/o.jobs) * 30 * time.Second)
	return bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%d", job, slot.Unix())}, {Key: "job_id", Value: job},
		{Key: "scheduled_at", Value: slot}, {Key: "status", Value: status}, {Key: "fence", Value: int64(i)},
		{Key: "instance", Value: "bench"}, {Key: "started_at", Value: slot}}
}

func (t *serverTarget) close() {
	if t.stop != nil {
		t.stop()
	}
	if t.client != nil {
		_ = t.client.Disconnect(context.Background())
	}
	_ = t.srv.Stop()
}

// round runs one round of every operation; round 0 is not recorded.
func (t *serverTarget) round(ctx context.Context, o serverSettings, round int, base time.Time) error {
	record := func(op string, d time.Duration, per int) {
		if round == 0 {
			return
		}
		for range per {
			t.samples[op] = append(t.samples[op], d/time.Duration(per))
		}
	}
	rng := rand.New(rand.NewPCG(uint64(round), 12))
	// Conditional updates by _id, as the fire path's ends and lock writes.
	var models []mongo.WriteModel
	for range o.bulk {
		i := rng.IntN(o.docs)
		id := runRecord(o, i, base, "")[0].Value
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: id}, {Key: "status", Value: bson.D{{Key: "$ne", Value: "x"}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "note", Value: round}}}}))
	}
	start := time.Now()
	if _, err := t.runs.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("bulk update: %w", err)
	}
	record(serverOps[0], time.Since(start), o.bulk)
	// New records, as a claim batch inserts them.
	var docs []any
	for k := range o.bulk {
		d := runRecord(o, o.docs+round*o.bulk+k, base, "running")
		docs = append(docs, d)
	}
	start = time.Now()
	if _, err := t.runs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		return fmt.Errorf("insertMany: %w", err)
	}
	record(serverOps[1], time.Since(start), o.bulk)
	for range o.finds {
		job := fmt.Sprintf("job-%06d", rng.IntN(o.jobs))
		start = time.Now()
		cur, err := t.runs.Find(ctx, bson.D{{Key: "job_id", Value: job}})
		if err != nil {
			return fmt.Errorf("find: %w", err)
		}
		var got []bson.Raw
		if err := cur.All(ctx, &got); err != nil {
			return fmt.Errorf("find: %w", err)
		}
		record(serverOps[2], time.Since(start), 1)
		if len(got) == 0 {
			return errors.New("find by job_id found nothing")
		}
		start = time.Now()
		err = t.runs.FindOne(ctx, bson.D{{Key: "job_id", Value: job},
			{Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: base.Add(time.Hour)}}}},
			options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}})).Err()
		if err != nil {
			return fmt.Errorf("find range: %w", err)
		}
		record(serverOps[3], time.Since(start), 1)
	}
	for range o.fullReads {
		first, all, n, err := fullRead(ctx, t.runs)
		if err != nil {
			return fmt.Errorf("full read: %w", err)
		}
		if n < o.docs {
			return fmt.Errorf("full read returned %d documents, want at least %d", n, o.docs)
		}
		record(serverOps[4], first, 1)
		record(serverOps[5], all, 1)
	}
	return nil
}

// fullRead reads the whole collection as a daemon's full read does (a find
// with changestream.SnapshotBatchSize, no filter, no sort): the time to the
// first batch, to the last document, and the documents read.
func fullRead(ctx context.Context, coll *mongo.Collection) (first, all time.Duration, n int, err error) {
	start := time.Now()
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(changestream.SnapshotBatchSize))
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	first = time.Since(start)
	for cur.Next(ctx) {
		n++
	}
	return first, time.Since(start), n, cur.Err()
}
