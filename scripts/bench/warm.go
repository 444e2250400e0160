package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/scaledoc"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/resumetoken"
)

// warmResult is the warm-restart phase (change stream mode): the edit
// phase's daemon stopped cleanly, edits made while it is down, and a new
// daemon started with the same instance id and state_file.
type warmResult struct {
	stateFile string

	// The clean stop of the edit phase's daemon, right after it armed lastUp.
	lastUp   *edit
	stopAt   time.Time // SIGTERM sent
	stopTook time.Duration
	stopErr  error

	// The state file as the stop left it, read by the bench before the
	// restart: size, documents, when it was saved, and whether its token is
	// the one stored in resume_tokens (the daemon's condition for a warm start).
	fileErr     error
	fileBytes   int64
	fileDocs    int
	fileSavedAt time.Time
	fileHasLast bool // the file holds lastUp's expression for its job
	tokenErr    error
	tokenMatch  bool

	// The restarted daemon, all from its process start.
	started      time.Time
	startToReady time.Duration
	armed        logRecord // its "armed from state file" record (zero Msg if none)
	startToArmed time.Duration
	reloads      []logRecord // "full reload" records it logged: should be none
	notes        []string    // its records about the state file / stored token

	edits     []*edit // edits made while it was down, in order
	unmatched int     // "schedule applied" records for other expressions (replayed from before the stop)
	wait      time.Duration
}

// warmStats summarises the edits made while the daemon was down: how many
// it logged as applied, how many are missing, and process start → the
// last of them applied (from the daemon's log timestamps).
func warmStats(started time.Time, edits []*edit) (applied, missing int, startToLast time.Duration) {
	var last time.Time
	for _, e := range edits {
		if e.armedLog.IsZero() {
			missing++
			continue
		}
		applied++
		if e.armedLog.After(last) {
			last = e.armedLog
		}
	}
	if applied > 0 {
		startToLast = last.Sub(started)
	}
	return applied, missing, startToLast
}

// measureWarm stops d (the edit phase's daemon, started from spec with a
// state_file, whose log records go to t), makes o.warmEdits edits while it
// is down, starts a new daemon with the same instance id and state file, and
// measures how soon it is armed and has applied those edits.
//
// Just before the stop it makes one more edit and waits for d to arm it, so
// that its position is not yet saved (saves with a state file wait up to a
// second) and only the shutdown's own flush can write it: the state file is
// then checked for that edit. Edit indexes continue after the edit phase's,
// so expressions and jobs are new.
func measureWarm(ctx context.Context, o settings, r *modeResult, d *daemon, t *tracker, spec daemonSpec, coll *mongo.Collection) error {
	w := &warmResult{stateFile: spec.stateFile}
	r.warm = w
	first := o.warmup + o.edits
	stride := strideFor(o.n)
	job := func(i int) string { return scaledoc.ID(int((int64(i) * int64(stride)) % int64(o.n))) }
	set := func(e *edit) error {
		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: e.job}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: e.expr}, {Key: "updated_at", Value: time.Now().UTC()}}}})
		if err != nil {
			return fmt.Errorf("warm restart: update %s: %w", e.job, err)
		}
		if res.MatchedCount != 1 {
			return fmt.Errorf("warm restart: update %s: matched %d documents", e.job, res.MatchedCount)
		}
		return nil
	}

	w.lastUp = t.add(job(first), editExpr(first))
	if err := set(w.lastUp); err != nil {
		return err
	}
	t.acked(w.lastUp, time.Now())
	if !t.wait(ctx, time.Now().Add(30*time.Second), func() bool { return !w.lastUp.armedLog.IsZero() }) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("warm restart: the edit before the stop (%s) was not armed within 30s", w.lastUp.job)
	}
	logf("warm restart: stopping the daemon (SIGTERM) right after it armed one more edit")
	w.stopAt = time.Now()
	w.stopTook, w.stopErr = d.shutdown(30 * time.Second)
	w.inspectFile(ctx, coll, spec)

	wt := newTracker()
	for i := first + 1; i <= first+o.warmEdits; i++ {
		e := wt.add(job(i), editExpr(i))
		if err := set(e); err != nil {
			return err
		}
		wt.acked(e, time.Now())
	}
	logf("warm restart: %d edits made while down; starting a new daemon with the same instance id and state file", o.warmEdits)

	spec.logPath = filepath.Join(filepath.Dir(spec.logPath), spec.instanceID+"-warm.log")
	spec.onRecord = func(rec logRecord, recv time.Time) {
		if rec.Msg == msgApplied {
			wt.armedExpr(rec.CronExpr, rec.Time, recv)
		}
	}
	nd, err := startDaemon(ctx, spec)
	if err != nil {
		return fmt.Errorf("warm restart: %w", err)
	}
	defer nd.stop()
	w.started = nd.started
	if w.startToReady, err = nd.waitReady(ctx, readyLimit); err != nil {
		return fmt.Errorf("warm restart: %w", err)
	}
	readyAt := time.Now()
	if rec, err := nd.armedFromFile(ctx, 10*time.Second); err == nil {
		w.armed = rec
		w.startToArmed = rec.Time.Sub(nd.started)
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	// The edits made while down come through the resumed stream after
	// ready; wait for all of them (or the deadline) without a fixed pause.
	w.wait = 30 * time.Second
	all := func() bool {
		for _, e := range wt.edits {
			if e.armedLog.IsZero() {
				return false
			}
		}
		return true
	}
	if !wt.wait(ctx, readyAt.Add(w.wait), all) && ctx.Err() != nil {
		return ctx.Err()
	}
	wt.mu.Lock()
	w.edits = append([]*edit(nil), wt.edits...)
	w.unmatched = wt.unmatched
	wt.mu.Unlock()
	w.reloads = nd.Reloads()
	w.notes = nd.Notes()
	applied, missing, last := warmStats(w.started, w.edits)
	logf("warm restart: ready after %s, armed from file %s after start (%d documents, logged %s); %d/%d edits made while down applied, the last %s after start",
		w.startToReady.Round(time.Millisecond), w.startToArmed.Round(time.Millisecond), w.armed.Documents,
		time.Duration(w.armed.Duration).Round(time.Millisecond), applied, applied+missing, last.Round(time.Millisecond))
	for _, p := range w.problems(o) {
		logf("warm restart: PROBLEM: %s", p)
	}
	for _, p := range nd.Problems() {
		r.problems = append(r.problems, "warm restart daemon: "+p)
	}
	return nil
}

// inspectFile reads the state file the stop left and the stored resume
// token, so a report can say why a restart was not warm.
func (w *warmResult) inspectFile(ctx context.Context, coll *mongo.Collection, spec daemonSpec) {
	b, err := os.ReadFile(w.stateFile)
	if err != nil {
		w.fileErr = err
		return
	}
	w.fileBytes = int64(len(b))
	st, info, err := statefile.Decode(b)
	if err != nil {
		w.fileErr = fmt.Errorf("state file %s: %w", w.stateFile, err)
		return
	}
	w.fileDocs, w.fileSavedAt = info.Documents, info.SavedAt
	for doc, err := range st.Docs {
		if err != nil {
			w.fileErr = fmt.Errorf("state file %s: %w", w.stateFile, err)
			return
		}
		if id, _ := doc.Lookup("_id").StringValueOK(); id == w.lastUp.job {
			expr, _ := doc.Lookup("cron_expr").StringValueOK()
			w.fileHasLast = expr == w.lastUp.expr
			break
		}
	}
	tok, err := resumetoken.NewMongoStore(coll.Database().Collection(resumetoken.CollectionName)).Load(ctx, spec.instanceID)
	if err != nil {
		w.tokenErr = err
		return
	}
	w.tokenMatch = bytes.Equal(tok.Value, st.Token)
}

// problems lists what went wrong in the phase, for the report.
func (w *warmResult) problems(o settings) []string {
	var out []string
	if w.stopErr != nil {
		out = append(out, "stopping the edit phase's daemon: "+w.stopErr.Error())
	}
	if w.fileErr != nil {
		out = append(out, fmt.Sprintf("state file after the stop: %v", w.fileErr))
	} else {
		if !w.fileHasLast {
			out = append(out, "the state file after the stop lacks the edit armed just before it (not flushed on shutdown)")
		}
		if w.fileDocs != o.n {
			out = append(out, fmt.Sprintf("state file after the stop holds %d documents, want %d", w.fileDocs, o.n))
		}
		switch {
		case w.tokenErr != nil:
			out = append(out, fmt.Sprintf("stored resume token after the stop: %v", w.tokenErr))
		case !w.tokenMatch:
			out = append(out, "the state file's token is not the stored resume token after the stop")
		}
	}
	if w.armed.Msg == "" {
		out = append(out, "the restarted daemon logged no \"armed from state file\" record")
	} else if w.armed.Documents != o.n {
		out = append(out, fmt.Sprintf("armed %d documents from the state file, want %d", w.armed.Documents, o.n))
	}
	for _, rec := range w.reloads {
		out = append(out, fmt.Sprintf("the restarted daemon did a full reload (reason %s, %d documents): it read the collection", rec.Reason, rec.Documents))
	}
	if len(w.reloads) > 0 {
		for _, n := range w.notes {
			out = append(out, "the restarted daemon logged: "+n)
		}
	}
	if _, missing, _ := warmStats(time.Time{}, w.edits); missing > 0 {
		out = append(out, fmt.Sprintf("%d of %d edits made while down not logged as applied within %s of ready", missing, len(w.edits), w.wait))
	}
	return out
}
