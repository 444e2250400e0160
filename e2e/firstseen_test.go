package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/internal/triggers"
)

// waitFirstSeen waits for job id's first sighting in the edit history.
func waitFirstSeen(t *testing.T, db *mongo.Database, id string) history.Sighting {
	t.Helper()
	var s history.Sighting
	waitFor(t, 30*time.Second, "first sighting of "+id, func() bool {
		var ok bool
		var err error
		s, ok, err = history.ReadFirstSeen(testCtx(t), db.Collection(history.CollectionName), id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	return s
}

// noSlotBefore fails the test if tl lists anything at or before created,
// or an expected slot at or before the first sighting.
func noSlotBefore(t *testing.T, what string, tl timeline.Timeline, created time.Time) {
	t.Helper()
	if tl.FirstSeen == nil {
		t.Errorf("%s: no first_seen", what)
		return
	}
	for _, e := range tl.Entries {
		if e.Kind != timeline.KindEdit && !e.At.After(created) {
			t.Errorf("%s: %s entry at %s, before the job was created (%s)", what, e.Kind, e.At, created)
		}
		if e.Kind == timeline.KindNoRecord && !e.At.After(tl.FirstSeen.At) {
			t.Errorf("%s: no_record at %s, not after the first sighting %s", what, e.At, tl.FirstSeen.At)
		}
	}
}

// Two jobs created now, one before the daemon starts (its insert is not
// in the history: the daemon's first full read sights it) and one while
// it runs (its insert event does): `explain --from -48h` and the timeline
// endpoint list no slot before either was created; `backfill --from -3m`
// refuses, naming the first sighting (the dry run lists those slots as
// refused and exits 0), and requests
// nothing; a backfill request inserted with mongosh of a slot before the
// job's creation is refused by the daemon.
func TestJobCreatedNowHasNoSlotBeforeItsCreation(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	cliOK(t, cfg, "init")
	earlyCreated := time.Now().UTC()
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({_id: "early", cron_expr: "*/2 * * * * *", job: "other", updated_at: new Date()})`)
	d := startDaemon(t, cfg)
	d.waitReady()
	early := waitFirstSeen(t, db, "early")
	if early.Source != history.SourceRead || !early.At.After(earlyCreated) {
		t.Errorf("early's first sighting %+v: want the daemon's first read, after %s", early, earlyCreated)
	}
	bornCreated := time.Now().UTC()
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({_id: "born", cron_expr: "*/2 * * * * *", job: "other", updated_at: new Date()})`)
	born := waitFirstSeen(t, db, "born")
	if born.Source != history.SourceInsert || !born.At.After(bornCreated) || born.At.After(time.Now()) {
		t.Errorf("born's first sighting %+v: want its insert, after %s", born, bornCreated)
	}
	waitFor(t, 30*time.Second, "both jobs ran", func() bool {
		return len(allRuns(t, db, bson.D{{Key: "job_id", Value: "early"}})) > 0 && len(allRuns(t, db, bson.D{{Key: "job_id", Value: "born"}})) > 0
	})

	for _, job := range []struct {
		id      string
		created time.Time
		seen    history.Sighting
	}{{"early", earlyCreated, early}, {"born", bornCreated, born}} {
		var tl timeline.Timeline
		if err := json.Unmarshal([]byte(cliOK(t, cfg, "explain", job.id, "--from", "-48h", "-o", "json")), &tl); err != nil {
			t.Fatal(err)
		}
		noSlotBefore(t, "explain "+job.id, tl, job.created)
		if tl.FirstSeen != nil && (!tl.FirstSeen.At.Equal(job.seen.At) || tl.FirstSeen.Source != job.seen.Source) {
			t.Errorf("explain %s: first_seen %+v, want %+v", job.id, tl.FirstSeen, job.seen)
		}
		text := cliOK(t, cfg, "explain", job.id, "--from", "-48h")
		if !strings.Contains(text, "first seen "+job.seen.At.Format("2006-01-02T15:04:05.000Z07:00")) {
			t.Errorf("explain %s does not say where it begins:\n%s", job.id, text)
		}
		var api timeline.Timeline
		if code := d.get("/api/schedules/"+job.id+"/timeline?from=-48h", &api); code != http.StatusOK {
			t.Fatalf("timeline endpoint of %s: %d", job.id, code)
		}
		noSlotBefore(t, "GET timeline "+job.id, api, job.created)

		args := []string{"backfill", job.id, "--from", "-3m", "--to", "now"}
		out, errOut, code := cli(t, cfg, args...)
		if code != 1 || !strings.Contains(errOut, "first seen at "+job.seen.At.Format("2006-01-02T15:04:05.000Z07:00")) ||
			!strings.Contains(errOut, "--before-first-seen") {
			t.Errorf("cronswap %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 naming the first sighting", args, code, out, errOut)
		}
		// The dry run shows what a request would refuse, and requests nothing.
		out, errOut, code = cli(t, cfg, append(args, "--dry-run")...)
		if code != 0 || !strings.Contains(out, "before the job was first seen: needs --before-first-seen") {
			t.Errorf("cronswap %q --dry-run: exit %d\nstdout:\n%s\nstderr:\n%s\nwant the slots before the sighting listed as refused", args, code, out, errOut)
		}
	}
	if n, err := db.Collection(triggers.CollectionName).CountDocuments(testCtx(t), bson.D{}); err != nil || n != 0 {
		t.Fatalf("refused backfills left %d requests (%v)", n, err)
	}

	// By hand, a slot of born's schedule before it was created.
	slot := bornCreated.Truncate(2 * time.Second).Add(-4 * time.Second)
	mongosh(t, uri, db.Name(), fmt.Sprintf(`db.triggers.insertOne({_id: "by_hand", job_id: "born", slot: new Date(%q)})`, slot.Format(time.RFC3339)))
	doc := trigFinal(t, db, "by_hand")
	if doc.Status != triggers.StatusRejected || !strings.Contains(doc.Error, "first seen at") {
		t.Errorf("a backfill request by hand of a slot before the job: %+v, want rejected naming the first sighting", doc)
	}
	if runs := allRuns(t, db, bson.D{{Key: "job_id", Value: "born"}, {Key: "scheduled_at", Value: bson.D{{Key: "$lte", Value: bornCreated}}}}); len(runs) != 0 {
		t.Errorf("born has records before it was created: %+v", runs)
	}
}

// countLogs counts d's log lines with message msg.
func (d *daemon) countLogs(msg string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.lines {
		if l.str("msg") == msg {
			n++
		}
	}
	return n
}

const (
	msgSightedByRead = "first sightings recorded from a full read"
	msgGoneByRead    = "first sightings of jobs a full read no longer found marked deleted"
)

// Full reads write a sighting once per job, never again: a streaming
// daemon whose resync runs every second sights the jobs that predate it
// at its first read and writes nothing at the resyncs after; a polling
// daemon (no change stream, so no insert events) sights a job at the first
// poll that finds it and marks it deleted at the first that does not,
// once each.
func TestFirstSightingsFromFullReadsAreWrittenOnce(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("other", "@hourly"))
	stream := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "s1", Watch: "  resync_interval: 1s\n"}))
	stream.waitReady()
	waitFirstSeen(t, db, "daily_report")
	waitFirstSeen(t, db, "other")
	waitFor(t, 30*time.Second, "three resyncs", func() bool {
		n := 0
		stream.mu.Lock()
		for _, l := range stream.lines {
			if l.str("msg") == "full reload" && l.str("reason") == "resync" {
				n++
			}
		}
		stream.mu.Unlock()
		return n >= 3
	})
	if n := stream.countLogs(msgSightedByRead); n != 1 {
		t.Errorf("streaming daemon logged %q %d times over three resyncs, want once (its first read)", msgSightedByRead, n)
	}
	stream.signal(syscall.SIGTERM)
	if err := stream.wait(60 * time.Second); err != nil {
		t.Fatalf("streaming daemon exit: %v", err)
	}

	poll := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "p1", Watch: "  mode: poll\n  poll_interval: 200ms\n"}))
	poll.waitReady()
	mongosh(t, uri, db.Name(), `db.schedules.insertOne({_id: "polled", cron_expr: "@hourly", job: "other"})`)
	polled := waitFirstSeen(t, db, "polled")
	if polled.Source != history.SourceRead || polled.Instance != "p1" {
		t.Errorf("sighting in poll mode: %+v, want p1's read", polled)
	}
	mongosh(t, uri, db.Name(), `db.schedules.deleteOne({_id: "polled"})`)
	waitFor(t, 30*time.Second, "polled marked deleted", func() bool {
		s, _, err := history.ReadFirstSeen(testCtx(t), db.Collection(history.CollectionName), "polled")
		return err == nil && !s.DeletedAt.IsZero()
	})
	// Every poll's reload is logged (at debug when it changed nothing).
	polls := func() int { return poll.countLogs("schedules replaced") }
	after := polls()
	waitFor(t, 30*time.Second, "five more polls", func() bool { return polls() >= after+5 })
	// The first poll sighted nothing new (the jobs have live sightings),
	// then one write for polled, one for its deletion.
	if n := poll.countLogs(msgSightedByRead); n != 1 {
		t.Errorf("polling daemon logged %q %d times, want once (polled)", msgSightedByRead, n)
	}
	if n := poll.countLogs(msgGoneByRead); n != 1 {
		t.Errorf("polling daemon logged %q %d times, want once (polled)", msgGoneByRead, n)
	}
}
