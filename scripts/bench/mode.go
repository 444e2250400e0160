package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// modeResult is everything measured for one watch mode.
type modeResult struct {
	mode     string
	external bool

	loadTime  time.Duration // insertMany of N documents
	collBytes int64         // BSON size of the N documents

	// Full reload without a token: daemon process start → /readyz 200, and
	// the duration the daemon logged for the reload itself. The idle phase
	// starts a second daemon (another instance id, so again no token).
	startToReady, idleStartToReady time.Duration
	reloadLogged, idleReloadLogged time.Duration
	reload                         logRecord // the edit phase daemon's start-up "full reload" record

	// warm is the warm-restart phase (change stream mode with -warm-edits > 0).
	warm *warmResult

	edits        []*edit // measured edits (warmup excluded)
	held         int     // edits that waited for the in-flight bound
	unmatched    int
	hasFloor     bool
	floorErr     error
	editWindow   time.Duration // first measured send → last ack
	metrics      metricsDelta
	idleWindow   time.Duration
	idleCommands map[string]int
	problems     []string
}

// runMode measures one watch mode on a fresh server.
func runMode(ctx context.Context, o settings, mode, logDir string) (*modeResult, error) {
	r := &modeResult{mode: mode, hasFloor: mode == modeChangeStream}
	srv, err := testmongo.Start(ctx, testmongo.Options{StartTimeout: 2 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop() }()
	r.external = srv.External()
	client, err := testmongo.Connect(ctx, srv.URI)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	dbName := testmongo.DatabaseName("bench_" + mode)
	db := client.Database(dbName)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = db.Drop(dctx)
	}()
	coll := db.Collection("schedules")

	logf("loading %d schedules into %s", o.n, dbName)
	if r.loadTime, r.collBytes, err = load(ctx, coll, o.n, o.batch); err != nil {
		return nil, err
	}
	logf("loaded in %s", r.loadTime.Round(time.Millisecond))

	if err := measureEdits(ctx, o, r, srv.URI, dbName, coll, logDir); err != nil {
		return nil, err
	}
	if err := measureIdle(ctx, o, r, srv.URI, dbName, logDir); err != nil {
		return nil, err
	}
	return r, nil
}

// readyLimit bounds a start-up full reload.
const readyLimit = 20 * time.Minute

func measureEdits(ctx context.Context, o settings, r *modeResult, uri, dbName string, coll *mongo.Collection, logDir string) error {
	t := newTracker()
	spec := daemonSpec{
		binary: o.binary, uri: uri, database: dbName, instanceID: "bench-" + r.mode, mode: r.mode,
		pollInterval: o.pollInterval, logPath: filepath.Join(logDir, "bench-"+r.mode+".log"),
		onRecord: func(rec logRecord, recv time.Time) {
			switch {
			case r.mode == modeChangeStream && rec.Msg == msgApplied:
				t.armedExpr(rec.CronExpr, rec.Time, recv)
			case r.mode == modePoll && rec.Msg == msgFullReload && rec.Reason == modePoll && rec.schedulesWatcher():
				for _, id := range rec.ChangedIDs {
					t.armedJob(id, rec.Time, recv)
				}
			}
		},
	}
	warm := r.mode == modeChangeStream && o.warmEdits > 0
	if warm {
		// The warm-restart phase restarts this daemon from its state file.
		// A file left by an earlier run with -logs is removed: a fresh
		// database has no token, so it would not be used anyway.
		spec.stateFile = filepath.Join(logDir, "bench-"+r.mode+".state")
		if err := os.Remove(spec.stateFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	d, err := startDaemon(ctx, spec)
	if err != nil {
		return err
	}
	defer d.stop()
	if r.startToReady, err = d.waitReady(ctx, readyLimit); err != nil {
		return err
	}
	if rec, err := d.initialReload(ctx, time.Minute); err == nil {
		r.reload = rec
		r.reloadLogged = time.Duration(rec.Duration)
	}
	logf("daemon ready after %s (full reload logged %s)", r.startToReady.Round(time.Millisecond), r.reloadLogged.Round(time.Millisecond))

	var fl *floor
	if r.hasFloor {
		if fl, err = startFloor(ctx, uri, dbName, t); err != nil {
			return err
		}
		defer fl.close()
	}
	settle := 10*time.Second + 5*o.pollInterval
	finish := func(what string) error {
		if !t.wait(ctx, time.Now().Add(settle), func() bool { return t.doneLocked(r.hasFloor) }) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("%s: not every edit was armed (and seen by the floor) within %s; the rest count as missing", what, settle)
		}
		// The daemon observes its metrics just after logging; give the
		// last edit's observation time to land before /metrics is read.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		return nil
	}

	if o.warmup > 0 {
		if _, err := driveEdits(ctx, coll, t, o, 0, o.warmup); err != nil {
			return err
		}
		if err := finish("warmup"); err != nil {
			return err
		}
	}
	before, err := scrapeMetrics(ctx, d)
	if err != nil {
		return err
	}
	logf("driving %d edits at %.3g/s", o.edits, o.rate)
	start := time.Now()
	if r.held, err = driveEdits(ctx, coll, t, o, o.warmup, o.warmup+o.edits); err != nil {
		return err
	}
	r.editWindow = time.Since(start)
	if err := finish("edits"); err != nil {
		return err
	}
	after, err := scrapeMetrics(ctx, d)
	if err != nil {
		return err
	}
	r.metrics = after.minus(before)
	if fl != nil {
		r.floorErr = fl.close()
	}
	t.mu.Lock()
	r.edits = append([]*edit(nil), t.edits[o.warmup:]...)
	r.unmatched = t.unmatched
	t.mu.Unlock()
	r.problems = append(r.problems, d.Problems()...)
	if warm {
		return measureWarm(ctx, o, r, d, t, spec, coll)
	}
	return nil
}

// measureIdle starts a second daemon behind internal/faultproxy and counts the
// commands it sends while nothing changes.
func measureIdle(ctx context.Context, o settings, r *modeResult, uri, dbName, logDir string) error {
	upstream, ok := faultproxy.Upstream(uri)
	if !ok {
		return fmt.Errorf("cannot proxy %q: not a mongodb:// connection string", uri)
	}
	px, err := faultproxy.New(ctx, upstream)
	if err != nil {
		return err
	}
	defer px.Close()
	d, err := startDaemon(ctx, daemonSpec{
		binary: o.binary, uri: px.URI(uri), database: dbName, instanceID: "bench-" + r.mode + "-idle", mode: r.mode,
		pollInterval: o.pollInterval, logPath: filepath.Join(logDir, "bench-"+r.mode+"-idle.log"),
	})
	if err != nil {
		return err
	}
	defer d.stop()
	if r.idleStartToReady, err = d.waitReady(ctx, readyLimit); err != nil {
		return err
	}
	if rec, err := d.initialReload(ctx, time.Minute); err == nil {
		r.idleReloadLogged = time.Duration(rec.Duration)
	}
	// Let the start-up settle (first token save, connection pool warm-up)
	// before the window opens.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	logf("idle window %s behind the proxy", o.idle)
	px.ResetStats()
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.idle):
	}
	st := px.Stats()
	r.idleWindow = time.Since(start)
	r.idleCommands = maps.Clone(st.Commands)
	r.problems = append(r.problems, d.Problems()...)
	return nil
}

// describeIdle formats commands per minute, highest first.
func describeIdle(cmds map[string]int, window time.Duration) (total float64, parts []string) {
	scale := float64(time.Minute) / float64(window)
	type kv struct {
		name string
		n    int
	}
	var list []kv
	for name, n := range cmds {
		list = append(list, kv{name, n})
		total += float64(n) * scale
	}
	slices.SortFunc(list, func(a, b kv) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.name, b.name)
	})
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%s %.1f", e.name, float64(e.n)*scale))
	}
	return total, parts
}
