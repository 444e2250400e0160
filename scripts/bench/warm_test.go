package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

// daemonLog writes records the way the daemon does (slog's JSON handler,
// the attributes changestream/watcher.go logs) and returns the text.
func daemonLog(t *testing.T, write func(log *slog.Logger)) string {
	t.Helper()
	var b bytes.Buffer
	write(slog.New(slog.NewJSONHandler(&b, nil)).With("instance_id", "bench-changestream"))
	return b.String()
}

// The daemon's sink logs the decode/engine split of a full reload just
// before the watcher's record, which then carries none of its own.
func TestReadLogTakesTheSplitFromTheSink(t *testing.T) {
	text := daemonLog(t, func(log *slog.Logger) {
		log.Info(msgStarted, "http_listen", "127.0.0.1:4242")
		log.Info(msgSinkReplaced, "documents", 1000, "changed", 1000, "decode", 30*time.Millisecond, "engine", 70*time.Millisecond)
		log.Info(msgFullReload, "reason", "startup", "documents", 1000, "changed", 1000, "duration", 150*time.Millisecond,
			"read", 40*time.Millisecond)
		log.Info(msgFullReload, "reason", "poll", "documents", 1000, "changed", 1, "duration", 50*time.Millisecond,
			"read", 40*time.Millisecond, "decode", 3*time.Millisecond, "engine", 4*time.Millisecond)
	})
	d := &daemon{}
	d.readLog(strings.NewReader(text), &bytes.Buffer{}, make(chan string, 1), nil)
	if len(d.reloads) != 2 {
		t.Fatalf("full reload records %+v", d.reloads)
	}
	if a := d.reloads[0]; time.Duration(a.Decode) != 30*time.Millisecond || time.Duration(a.Engine) != 70*time.Millisecond {
		t.Errorf("startup reload parsed as %+v, want the sink's split", a)
	}
	if b := d.reloads[1]; time.Duration(b.Decode) != 3*time.Millisecond || time.Duration(b.Engine) != 4*time.Millisecond {
		t.Errorf("poll reload parsed as %+v, want its own split", b)
	}
}

func TestReadLogSortsWarmStartRecords(t *testing.T) {
	text := daemonLog(t, func(log *slog.Logger) {
		log.Info(msgStarted, "http_listen", "127.0.0.1:4242")
		log.Info("armed from state file", "watcher_id", "w", "documents", 100000, "changed", 100000,
			"duration", 305*time.Millisecond, "read", 10*time.Millisecond, "decode", 87*time.Millisecond, "engine", 176*time.Millisecond)
		log.Info("resuming change stream from stored token", "watcher_id", "w", "token_age", "734ms")
		log.Info(msgApplied, "job_id", "job-000001", "cron_expr", "1 0 1 1 *", "outcome", "replaced")
		log.Info("state file is not at the stored resume position (token reset, or stopped between the two saves); doing a full reload")
		log.Info(msgFullReload, "reason", "startup", "documents", 100000, "changed", 3, "duration", 2*time.Second,
			"read", time.Second, "decode", 400*time.Millisecond, "engine", 500*time.Millisecond)
		log.Warn("saving state file failed; the next start will reload everything unless a later save works", "error", "disk full")
	})
	d := &daemon{}
	addr := make(chan string, 1)
	var applied []logRecord
	d.readLog(strings.NewReader(text), &bytes.Buffer{}, addr, func(rec logRecord, _ time.Time) {
		if rec.Msg == msgApplied {
			applied = append(applied, rec)
		}
	})
	if got := <-addr; got != "127.0.0.1:4242" {
		t.Errorf("listen address %q", got)
	}
	if len(d.warm) != 1 {
		t.Fatalf("%d warm start records, want 1", len(d.warm))
	}
	a := d.warm[0]
	if a.Documents != 100000 || time.Duration(a.Duration) != 305*time.Millisecond || time.Duration(a.Read) != 10*time.Millisecond ||
		time.Duration(a.Decode) != 87*time.Millisecond || time.Duration(a.Engine) != 176*time.Millisecond {
		t.Errorf("warm start record parsed as %+v", a)
	}
	if len(d.reloads) != 1 || d.reloads[0].Reason != "startup" || time.Duration(d.reloads[0].Read) != time.Second {
		t.Errorf("full reload records %+v", d.reloads)
	}
	if len(applied) != 1 || applied[0].CronExpr != "1 0 1 1 *" {
		t.Errorf("applied records %+v", applied)
	}
	wantNotes := []string{
		"resuming change stream from stored token",
		"state file is not at the stored resume position (token reset, or stopped between the two saves); doing a full reload",
		"saving state file failed; the next start will reload everything unless a later save works",
	}
	if strings.Join(d.notes, "|") != strings.Join(wantNotes, "|") {
		t.Errorf("notes %q, want %q", d.notes, wantNotes)
	}
	if len(d.problems) != 1 || !strings.Contains(d.problems[0], "disk full") {
		t.Errorf("problems %q", d.problems)
	}
}

func TestSpecConfigSetsStateFileOnlyWhenAsked(t *testing.T) {
	s := daemonSpec{uri: "mongodb://127.0.0.1:1/", database: "db", instanceID: "bench-changestream",
		mode: modeChangeStream, pollInterval: time.Second}
	cfg, err := config.Parse(s.config())
	if err != nil {
		t.Fatalf("config without state_file: %v\n%s", err, s.config())
	}
	if cfg.StateFile != "" {
		t.Errorf("state_file = %q without being asked", cfg.StateFile)
	}
	s.stateFile = filepath.Join(t.TempDir(), "bench-changestream.state")
	if cfg, err = config.Parse(s.config()); err != nil {
		t.Fatalf("config with state_file: %v\n%s", err, s.config())
	}
	if cfg.StateFile != s.stateFile || cfg.InstanceID != "bench-changestream" || cfg.Watch.Mode != modeChangeStream {
		t.Errorf("parsed state_file %q, instance %q, mode %q", cfg.StateFile, cfg.InstanceID, cfg.Watch.Mode)
	}
}

func TestWarmStatsCountsAndLast(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	edits := []*edit{
		{armedLog: start.Add(300 * time.Millisecond)},
		{},
		{armedLog: start.Add(320 * time.Millisecond)},
		{armedLog: start.Add(310 * time.Millisecond)},
	}
	applied, missing, last := warmStats(start, edits)
	if applied != 3 || missing != 1 || last != 320*time.Millisecond {
		t.Errorf("warmStats = %d applied, %d missing, last %s; want 3, 1, 320ms", applied, missing, last)
	}
	if a, m, l := warmStats(start, []*edit{{}}); a != 0 || m != 1 || l != 0 {
		t.Errorf("none applied: %d, %d, %s", a, m, l)
	}
}

// goodWarm is a warm-restart phase where everything went right.
func goodWarm(n int) (*warmResult, time.Time) {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	w := &warmResult{
		lastUp: &edit{job: "job-000070", expr: "1 1 1 1 *"},
		stopAt: start.Add(-time.Second), stopTook: 40 * time.Millisecond,
		fileBytes: 8_400_254, fileDocs: n, fileSavedAt: start.Add(-980 * time.Millisecond), fileHasLast: true, tokenMatch: true,
		started: start, startToReady: 290 * time.Millisecond, startToArmed: 250 * time.Millisecond,
		armed: logRecord{Msg: msgArmedFromFile, Documents: n, Duration: int64(236 * time.Millisecond),
			Read: int64(10 * time.Millisecond), Decode: int64(66 * time.Millisecond), Engine: int64(138 * time.Millisecond)},
		wait: 30 * time.Second,
	}
	for i := 0; i < 20; i++ {
		w.edits = append(w.edits, &edit{armedLog: start.Add(280*time.Millisecond + time.Duration(i)*100*time.Microsecond)})
	}
	return w, start
}

func TestWarmProblems(t *testing.T) {
	o := settings{n: 1000}
	w, _ := goodWarm(o.n)
	if p := w.problems(o); len(p) != 0 {
		t.Fatalf("a clean phase reports problems: %q", p)
	}
	for name, c := range map[string]struct {
		spoil func(w *warmResult)
		want  string
	}{
		"stop":       {func(w *warmResult) { w.stopErr = errors.New("daemon did not exit within 30s of SIGTERM; killed") }, "killed"},
		"no file":    {func(w *warmResult) { w.fileErr = errors.New("open x: no such file or directory") }, "no such file"},
		"not flush":  {func(w *warmResult) { w.fileHasLast = false }, "not flushed on shutdown"},
		"short file": {func(w *warmResult) { w.fileDocs = 999 }, "holds 999 documents, want 1000"},
		"token":      {func(w *warmResult) { w.tokenMatch = false }, "not the stored resume token"},
		"not warm":   {func(w *warmResult) { w.armed = logRecord{} }, "no \"armed from state file\" record"},
		"reload": {func(w *warmResult) {
			w.reloads = []logRecord{{Msg: msgFullReload, Reason: "startup", Documents: 1000}}
			w.notes = []string{"state file unusable; doing a full reload"}
		}, "full reload (reason startup, 1000 documents): it read the collection"},
		"missing": {func(w *warmResult) { w.edits[3].armedLog = time.Time{} }, "1 of 20 edits made while down not logged as applied within 30s"},
	} {
		w, _ := goodWarm(o.n)
		c.spoil(w)
		p := strings.Join(w.problems(o), "\n")
		if !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want one containing %q", name, p, c.want)
		}
	}
}

func TestReportWarmSection(t *testing.T) {
	o := settings{n: 1000, edits: 10, warmEdits: 20, modes: []string{modeChangeStream}, rate: 5, maxInflight: 20,
		pollInterval: time.Second, idle: 20 * time.Second, batch: 1000}
	w, _ := goodWarm(o.n)
	r := &modeResult{mode: modeChangeStream, hasFloor: true, warm: w, idleWindow: time.Second,
		reload: logRecord{Msg: msgFullReload, Documents: 1000, Duration: int64(451 * time.Millisecond), Read: int64(147 * time.Millisecond),
			Decode: int64(129 * time.Millisecond), Engine: int64(116 * time.Millisecond)}}
	text := report{opts: o, results: []*modeResult{r}}.text()
	for _, want := range []string{
		"\nWarm restart from state_file (N=1000, changestream)",
		"stop: SIGTERM → exit 0.04 s (exit status 0)",
		"saved by the shutdown, holds the edit armed just before the stop: yes; its token = the stored resume token: yes",
		"start → /readyz 200: 0.29 s (target ≤ 1 s without reading the collection: met)",
		"logged 0.25 s after start: 1000 documents in 236 ms = read 10.0 ms + decode 66.0 ms + engine 138 ms + rest 22.0 ms",
		"first start's full reload in this run: 1000 documents in 451 ms = read 147 ms + decode 129 ms + engine 116 ms + rest 59.0 ms",
		"full reloads by the restarted daemon: none",
		"edits made while down: 20 of 20 applied, the last 0.28 s after start (-8.1 ms from the first /readyz 200 seen); 0 missing after waiting 30s",
		", 20 edits while down in the warm restart",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "PROBLEM") {
		t.Errorf("a clean phase reports a problem:\n%s", text)
	}

	// A restart that read the collection misses the target however fast it was.
	w.reloads = []logRecord{{Msg: msgFullReload, Reason: "startup", Documents: 1000}}
	text = report{opts: o, results: []*modeResult{r}}.text()
	for _, want := range []string{
		"(target ≤ 1 s without reading the collection: NOT met)",
		"full reloads by the restarted daemon: 1 (it read the collection)",
		"  PROBLEM: the restarted daemon did a full reload (reason startup, 1000 documents)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report of a cold restart lacks %q:\n%s", want, text)
		}
	}
	w.reloads = nil
	w.startToReady = 1500 * time.Millisecond
	if text = (report{opts: o, results: []*modeResult{r}}).text(); !strings.Contains(text, "start → /readyz 200: 1.50 s (target ≤ 1 s without reading the collection: NOT met)") {
		t.Errorf("a 1.5 s warm start meets the 1 s target:\n%s", text)
	}

	// Without the phase (poll mode, -warm-edits 0) there is no section.
	r.warm = nil
	if text = (report{opts: o, results: []*modeResult{r}}).text(); strings.Contains(text, "Warm restart") {
		t.Errorf("section without a warm phase:\n%s", text)
	}
}

func TestValidateWarmEdits(t *testing.T) {
	base := settings{n: 100, edits: 50, warmup: 10, rate: 5, batch: 1, maxInflight: 20}
	for _, c := range []struct {
		modes []string
		warm  int
		ok    bool
	}{
		{[]string{modeChangeStream}, 39, true},  // 10 + 50 + 1 + 39 = 100
		{[]string{modeChangeStream}, 40, false}, // one job too many
		{[]string{modePoll}, 40, true},          // poll mode has no warm phase
		{[]string{modeChangeStream}, 0, true},
		{[]string{modeChangeStream}, -1, false},
	} {
		o := base
		o.modes, o.warmEdits = c.modes, c.warm
		if err := o.validate(); (err == nil) != c.ok {
			t.Errorf("modes %v, -warm-edits %d: validate = %v, want ok %v", c.modes, c.warm, err, c.ok)
		}
	}
}

func TestReloadsForCountsOnlyTheReasonAsked(t *testing.T) {
	text := daemonLog(t, func(log *slog.Logger) {
		log.Info(msgFullReload, "reason", "startup", "documents", 10, "duration", time.Second)
		log.Info(msgFullReload, "reason", resyncReason, "documents", 10, "duration", 2*time.Second)
		log.Info(msgFullReload, "reason", "lost_position", "documents", 10, "duration", time.Second)
		log.Info(msgFullReload, "reason", resyncReason, "documents", 10, "duration", 3*time.Second)
	})
	d := &daemon{}
	d.readLog(strings.NewReader(text), &bytes.Buffer{}, make(chan string, 1), nil)
	got, err := d.reloadsFor(context.Background(), time.Second, resyncReason, 2)
	if err != nil || len(got) != 2 || time.Duration(got[1].Duration) != 3*time.Second {
		t.Errorf("two resyncs: %+v, %v", got, err)
	}
	if got, err := d.reloadsFor(context.Background(), 200*time.Millisecond, resyncReason, 3); err == nil || len(got) != 2 {
		t.Errorf("three resyncs asked, two logged: %d records, error %v; want the two and an error", len(got), err)
	}
	if got := resyncDurations(got); got != "2s, 3s" {
		t.Errorf("resyncDurations = %q", got)
	}
}
