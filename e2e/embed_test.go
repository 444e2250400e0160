package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	svc "github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// handle registers fn under name on s, with the default policy.
func handle(t *testing.T, s *svc.Service, name string, fn jobs.HandlerFunc) {
	t.Helper()
	if err := s.Handle(name, fn, jobs.Policy{}); err != nil {
		t.Fatal(err)
	}
}

// embedded is one daemon.Service running in the test's process, its HTTP
// surface on a loopback test server.
type embedded struct {
	id   string
	srv  *httptest.Server
	logs *syncBuffer
}

// runEmbedded runs s until the test ends (checking that Run returns nil)
// and serves its HTTP surface.
func runEmbedded(t *testing.T, id string, s *svc.Service, logs *syncBuffer) *embedded {
	t.Helper()
	e := &embedded{id: id, srv: httptest.NewServer(s.HTTPHandler()), logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
		e.srv.Close()
		if t.Failed() {
			t.Logf("%s log:\n%s", id, logs.String())
		}
	})
	return e
}

// schedule is the /api/schedules/{id} body of job id, as e serves it.
func (e *embedded) schedule(t *testing.T, id string) apiSchedule {
	t.Helper()
	resp, err := http.Get(e.srv.URL + "/api/schedules/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s apiSchedule
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (e *embedded) ready(t *testing.T) bool {
	t.Helper()
	resp, err := http.Get(e.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// embedLedgerEntry is what the ledger handler writes for each run it is handed.
type embedLedgerEntry struct {
	JobID    string    `bson:"job_id"`
	Slot     time.Time `bson:"slot"`
	Instance string    `bson:"instance"`
	RunID    string    `bson:"run_id"`
}

func readEmbedLedger(t *testing.T, coll *mongo.Collection) []embedLedgerEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var out []embedLedgerEntry
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// embedRun is the part of a job_runs record the test reads.
type embedRun struct {
	ID       string    `bson:"_id"`
	JobID    string    `bson:"job_id"`
	Slot     time.Time `bson:"scheduled_at"`
	Status   string    `bson:"status"`
	Error    string    `bson:"error"`
	Instance string    `bson:"instance"`
}

func embedRuns(t *testing.T, db *mongo.Database, filter bson.D) []embedRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := db.Collection("job_runs").Find(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	var out []embedRun
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Two embedded instances in one program, each a daemon.Service on its own
// client (web-1's through a fault proxy), with Go handlers: a mongosh edit
// of the job's cron_expr retimes it on both; over at least 20 slots each
// slot runs exactly once across the two (the handler's own ledger, checked
// against job_runs); a handler registered on web-1 only runs there, while
// web-2 shows the schedule's last_error as for an unknown action; cutting
// web-1 off the database mid-run ends that handler's ctx within the lease,
// and its record says how it ended; a handler that panics is recorded
// failed and the service keeps firing.
func TestEmbeddedServicesInOneProgram(t *testing.T) {
	uri, db := setup(t)
	p := newProxy(t, uri)
	ledger := db.Collection("ledger")
	const lockTTL = 3 * time.Second

	type ended struct {
		at    time.Time
		cause error
	}
	hangStarted := make(chan string, 1) // the run id
	hangEnded := make(chan ended, 1)

	newService := func(id string, client *mongo.Client) (*svc.Service, *syncBuffer) {
		logs := &syncBuffer{}
		s, err := svc.New(client.Database(db.Name()), svc.Options{
			InstanceID:    id,
			Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			LockTTL:       lockTTL,
			BackoffMin:    50 * time.Millisecond,
			BackoffMax:    500 * time.Millisecond,
			ShutdownGrace: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		handle(t, s, "ledger", func(ctx context.Context, r jobs.Run) error {
			// The ledger is written through the test's own client, so that
			// web-1's cut does not stop it.
			_, err := ledger.InsertOne(context.Background(), embedLedgerEntry{JobID: r.JobID, Slot: r.Slot, Instance: id, RunID: r.RunID})
			return err
		})
		handle(t, s, "boom", func(context.Context, jobs.Run) error { panic("boom: the report template is missing") })
		return s, logs
	}
	s1, logs1 := newService("web-1", testmongo.ClientFor(t, p.URI(uri)))
	handle(t, s1, "hang", func(ctx context.Context, r jobs.Run) error {
		hangStarted <- r.RunID
		<-ctx.Done()
		hangEnded <- ended{at: time.Now(), cause: context.Cause(ctx)}
		return ctx.Err()
	})
	s2, logs2 := newService("web-2", testmongo.Client(t))

	// Two ledger jobs, one owned by each instance (owners claim at once,
	// the other instance after a grace), so that both run slots.
	tock := ""
	for _, id := range []string{"tock", "tack", "tuck", "tech", "toll"} {
		if members.Owner(id, []members.Member{{ID: "web-1"}, {ID: "web-2"}}).ID != members.Owner("tick", []members.Member{{ID: "web-1"}, {ID: "web-2"}}).ID {
			tock = id
			break
		}
	}
	if tock == "" {
		t.Fatal("no job id owned by the other instance than tick's")
	}
	mongosh(t, uri, db.Name(), `db.schedules.insertMany([`+
		`{ _id: "tick", cron_expr: "*/2 * * * * *", job: "ledger", updated_at: new Date() },`+
		`{ _id: "`+tock+`", cron_expr: "*/2 * * * * *", job: "ledger", updated_at: new Date() }])`)
	web1, web2 := runEmbedded(t, "web-1", s1, logs1), runEmbedded(t, "web-2", s2, logs2)
	both := []*embedded{web1, web2}
	waitFor(t, 30*time.Second, "both ready", func() bool { return web1.ready(t) && web2.ready(t) })
	waitFor(t, 20*time.Second, "tick and "+tock+" to run", func() bool { return len(readEmbedLedger(t, ledger)) >= 4 })

	// A mongosh edit retimes the job live on both.
	editedAt := time.Now()
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "tick" }, { $set: { cron_expr: "* * * * * *", updated_at: new Date() } })`)
	for _, e := range both {
		waitFor(t, 5*time.Second, e.id+" to re-arm tick", func() bool {
			s := e.schedule(t, "tick")
			return s.Armed && s.CronExpr == "* * * * * *"
		})
	}
	t.Logf("edit armed on both %s after the mongosh call began", time.Since(editedAt).Round(time.Millisecond))

	// A handler that panics: its run is recorded failed with the panic's
	// message; the service keeps firing.
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "report", cron_expr: "*/2 * * * * *", job: "boom", updated_at: new Date() })`)
	var boom embedRun
	waitFor(t, 20*time.Second, "the panicking run to be recorded", func() bool {
		recs := embedRuns(t, db, bson.D{{Key: "job_id", Value: "report"}, {Key: "status", Value: "failed"}})
		if len(recs) > 0 {
			boom = recs[0]
		}
		return len(recs) > 0
	})
	if !strings.Contains(boom.Error, "panic") || !strings.Contains(boom.Error, "the report template is missing") {
		t.Errorf("panicking run recorded with error %q, want the panic and its message", boom.Error)
	}
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({ _id: "report" })`)

	// A handler only web-1 has: web-2 refuses the schedule as naming an
	// unknown action; web-1 runs it. Cutting web-1 off the database ends
	// the run's ctx within the lease.
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "slow", cron_expr: "* * * * * *", job: "hang", updated_at: new Date() })`)
	waitFor(t, 5*time.Second, "web-2 to refuse slow", func() bool {
		s := web2.schedule(t, "slow")
		return !s.Armed && strings.Contains(s.LastError, `unknown action "hang"`)
	})
	var hangRun string
	select {
	case hangRun = <-hangStarted:
	case <-time.After(20 * time.Second):
		t.Fatal("the hanging handler did not start on web-1")
	}
	cutAt := time.Now()
	p.Outage(time.Hour)
	var end ended
	select {
	case end = <-hangEnded:
	case <-time.After(3 * lockTTL):
		t.Fatalf("the handler's ctx did not end within %s of the cut", 3*lockTTL)
	}
	took := end.at.Sub(cutAt)
	t.Logf("handler ctx ended %s after the cut (lease %s): %v", took.Round(time.Millisecond), lockTTL, end.cause)
	if took > lockTTL {
		t.Errorf("the handler's ctx ended %s after the cut, later than the lease (%s) allows", took, lockTTL)
	}
	if end.cause == nil || !strings.Contains(end.cause.Error(), "lease") {
		t.Errorf("the handler's ctx ended for %v, want the lost lease", end.cause)
	}
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({ _id: "slow" })`)
	p.RefuseFor(0)
	var hung embedRun
	waitFor(t, 30*time.Second, "the cut run's record to end", func() bool {
		recs := embedRuns(t, db, bson.D{{Key: "_id", Value: hangRun}})
		if len(recs) == 1 {
			hung = recs[0]
		}
		return len(recs) == 1 && hung.Status != "running" && hung.Status != "claiming"
	})
	t.Logf("the cut run's record: %s %q", hung.Status, hung.Error)
	if hung.Status != "abandoned" && hung.Status != "failed" {
		t.Errorf("the cut run was recorded %s (%q), want abandoned or failed", hung.Status, hung.Error)
	}

	// At least 20 every-second slots after the edit, each run exactly once
	// across the two instances, and every one recorded succeeded.
	waitFor(t, 60*time.Second, "20 slots after the edit", func() bool {
		n := 0
		for _, e := range readEmbedLedger(t, ledger) {
			if e.JobID == "tick" && e.Slot.After(editedAt.Add(time.Second)) {
				n++
			}
		}
		return n >= 20
	})
	entries := readEmbedLedger(t, ledger)
	type fire struct {
		job  string
		slot time.Time
	}
	byFire := map[fire][]string{}
	for _, e := range entries {
		f := fire{e.JobID, e.Slot.UTC()}
		byFire[f] = append(byFire[f], e.Instance)
	}
	// A handler writes its ledger entry before its run's end is recorded:
	// the last fires read may still be running in job_runs.
	runs := map[fire]embedRun{}
	waitFor(t, 30*time.Second, "the runs of the ledger's fires to be recorded ended", func() bool {
		clear(runs)
		for _, r := range embedRuns(t, db, bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: bson.A{"tick", tock}}}}}) {
			runs[fire{r.JobID, r.Slot.UTC()}] = r
		}
		for f := range byFire {
			if s := runs[f].Status; s == "" || s == "running" || s == "claiming" {
				return false
			}
		}
		return true
	})
	ranOn := map[string]int{}
	var slots []time.Time // tick's, after the edit
	oddSeconds := 0
	for f, on := range byFire {
		if len(on) != 1 {
			t.Errorf("%s slot %s ran %d times (%v)", f.job, f.slot.Format(time.RFC3339), len(on), on)
		}
		ranOn[on[0]]++
		if r := runs[f]; r.Status != "succeeded" || r.Instance != on[0] {
			t.Errorf("%s slot %s: the ledger says %v, job_runs says %s on %q", f.job, f.slot.Format(time.RFC3339), on, r.Status, r.Instance)
		}
		if f.job == "tick" && f.slot.After(editedAt.Add(time.Second)) {
			slots = append(slots, f.slot)
			if f.slot.Second()%2 == 1 {
				oddSeconds++
			}
		}
	}
	if oddSeconds == 0 {
		t.Error("no slot of tick at an odd second: the edit to every second did not take")
	}
	if ranOn["web-1"] == 0 || ranOn["web-2"] == 0 {
		t.Errorf("slots ran on %v, want both instances", ranOn)
	}
	t.Logf("%d fires in the ledger; tick after the edit: %d slots, %d at odd seconds; ran on %v", len(byFire), len(slots), oddSeconds, ranOn)
	if len(slots) < 20 {
		t.Errorf("%d slots, want at least 20", len(slots))
	}
}

// The example program (examples/embedded) is built and run against the
// test server as a user would run it: it arms the schedule a mongosh
// insert names, its Go handler runs every slot once (the reports it
// writes against job_runs), it serves cronswap's API beside its own route,
// and it stops cleanly on SIGINT.
func TestExampleProgram(t *testing.T) {
	uri, db := setup(t)
	root, err := testmongo.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "embedded")
	build := exec.Command("go", "build", "-race", "-o", bin, "./examples/embedded")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/embedded: %v\n%s", err, out)
	}
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({ _id: "daily_report", cron_expr: "@every 1s", job: "report", args: { region: "eu" } })`)

	addr := freeLoopbackAddr(t)
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "-mongo-uri", uri, "-database", db.Name(), "-instance-id", "example-1", "-listen", addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("example program's log:\n%s", logs.String())
		}
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, 60*time.Second, "the example's /readyz", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, body := get("/hello"); code != http.StatusOK || !strings.Contains(body, "hello from example-1") {
		t.Errorf("/hello = %d %q, want the program's own route", code, body)
	}
	var job apiSchedule
	if code, body := get("/api/schedules/daily_report"); code != http.StatusOK || json.Unmarshal([]byte(body), &job) != nil || !job.Armed {
		t.Errorf("/api/schedules/daily_report = %d %s, want the job armed", code, body)
	}

	type report struct {
		ID       string `bson:"_id"`
		Region   string `bson:"region"`
		Instance string `bson:"instance"`
	}
	var reports []report
	waitFor(t, 30*time.Second, "three reports", func() bool {
		cur, err := db.Collection("reports").Find(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		reports = nil
		if err := cur.All(context.Background(), &reports); err != nil {
			t.Fatal(err)
		}
		return len(reports) >= 3
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("the example program exited with %v, want 0 after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the example program did not stop within 30 s of SIGINT")
	}
	succeeded := map[string]bool{}
	for _, r := range embedRuns(t, db, bson.D{{Key: "job_id", Value: "daily_report"}}) {
		if r.Status == "succeeded" {
			succeeded["daily_report@"+r.Slot.UTC().Format(time.RFC3339)] = true
		}
	}
	for _, r := range reports {
		if r.Region != "eu" || r.Instance != "example-1" || !succeeded[r.ID] {
			t.Errorf("report %+v: want region eu by example-1, its run recorded succeeded", r)
		}
	}
}
