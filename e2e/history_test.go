package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/history"
)

// The five edits, in one mongosh bulkWrite so that all five are committed
// before any replica reads their events: a looked-up fullDocument would
// then show the last version for every one of them; the entries must not.
const fiveEdits = `db.schedules.bulkWrite([
  { updateOne: { filter: { _id: "daily_report" }, update: { $set: { cron_expr: "0 8 * * *", updated_at: new Date() } } } },
  { updateOne: { filter: { _id: "daily_report" }, update: { $set: { timezone: "Europe/Berlin", updated_at: new Date() } } } },
  { updateOne: { filter: { _id: "daily_report" }, update: { $set: { enabled: false, updated_at: new Date() } } } },
  { updateOne: { filter: { _id: "daily_report" }, update: { $set: { enabled: true, updated_at: new Date() } } } },
  { updateOne: { filter: { _id: "daily_report" }, update: { $set: { args: { region: "eu", batch: 500 }, updated_by: "alice", updated_at: new Date() } } } }
], { ordered: true })`

// fiveEntries are the entries the five edits give, oldest first.
var fiveEntries = []string{
	`update [cron_expr: "0 9 * * *" → "0 8 * * *"]`,
	`update [timezone: (absent) → "Europe/Berlin"]`,
	`update [enabled: (absent) → false]`,
	`update [enabled: false → true]`,
	`update [args: (absent) → {"region":"eu","batch":500}] by alice`,
}

const msgHistoryCaughtUp = "schedule history recording: stream caught up"

// editsOnly matches the edits of the history, not the jobs' first sightings.
var editsOnly = bson.D{{Key: "op", Value: bson.D{{Key: "$ne", Value: history.OpFirstSeen}}}}

// historyOutcomes counts the daemon's history writes of job id: written,
// and already recorded (by another replica, or earlier).
func (d *daemon) historyOutcomes(id string) (written, duplicate int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if l.str("job_id") != id {
			continue
		}
		switch l.str("msg") {
		case "schedule history entry written":
			written++
		case "schedule history entry already recorded":
			duplicate++
		}
	}
	return written, duplicate
}

// historyOf reads job id's entries, oldest first, rendered as in fiveEntries.
func historyOf(t *testing.T, db *mongo.Database, id string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries, err := history.List(ctx, db.Collection(history.CollectionName), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		changes := make([]string, len(e.Changes))
		for j, c := range e.Changes {
			side := func(v bson.RawValue) string {
				if v.IsZero() {
					return "(absent)"
				}
				js, _ := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
				return strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}")
			}
			changes[j] = c.Field + ": " + side(c.Before) + " → " + side(c.After)
		}
		s := e.Op + " [" + strings.Join(changes, "; ") + "]"
		if e.UpdatedBy != "" {
			s += " by " + e.UpdatedBy
		}
		out[len(entries)-1-i] = s
	}
	return out
}

func storedToken(t *testing.T, db *mongo.Database, id string) bson.Raw {
	t.Helper()
	raw, err := db.Collection("resume_tokens").FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		t.Fatalf("resume token of %s: %v", id, err)
	}
	return append(bson.Raw(nil), raw.Lookup("token").Document()...)
}

// TestHistoryThreeReplicasFiveEditsOnceEach runs three replicas, makes five
// edits through mongosh and checks that they give exactly five entries with
// the right before → after, each written by one replica and found already
// recorded by the other two. Then one replica restarts with its token
// rewound to before the edits: it replays the five events and adds nothing;
// a sixth edit afterwards is recorded once, from the right "before", also
// by the restarted replica. `schedules history` shows them (table, JSON).
func TestHistoryThreeReplicasFiveEditsOnceEach(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("other", "@hourly"))
	var ds []*daemon
	var cfgs []string
	for i := 1; i <= 3; i++ {
		cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: fmt.Sprintf("h%d", i)})
		cfgs = append(cfgs, cfg)
		ds = append(ds, startDaemon(t, cfg))
	}
	for _, d := range ds {
		d.waitReady()
		d.waitLog("history recording", func(l logLine) bool { return l.str("msg") == msgHistoryCaughtUp })
	}
	var beforeEdits bson.Raw
	waitFor(t, 10*time.Second, "h1's token stored", func() bool {
		n, err := db.Collection("resume_tokens").CountDocuments(context.Background(), bson.D{{Key: "_id", Value: "h1"}})
		return err == nil && n == 1
	})
	beforeEdits = storedToken(t, db, "h1")

	mongosh(t, uri, db.Name(), fiveEdits)
	for _, d := range ds {
		waitFor(t, 30*time.Second, "each replica settled all five entries", func() bool {
			w, dup := d.historyOutcomes("daily_report")
			return w+dup == 5
		})
	}
	written, dups := 0, 0
	for _, d := range ds {
		w, dup := d.historyOutcomes("daily_report")
		written += w
		dups += dup
	}
	if written != 5 || dups != 10 {
		t.Errorf("replicas wrote %d entries and found %d already recorded; want 5 and 10", written, dups)
	}
	if got := historyOf(t, db, "daily_report"); strings.Join(got, "\n") != strings.Join(fiveEntries, "\n") {
		t.Fatalf("history after five edits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(fiveEntries, "\n"))
	}
	if n, _ := db.Collection(history.CollectionName).CountDocuments(context.Background(), editsOnly); n != 5 {
		t.Fatalf("%d entries in %s, want 5", n, history.CollectionName)
	}
	// Beside the edits, one first sighting per job, from the first full
	// read of whichever replica wrote first (the jobs predate the daemons).
	for _, id := range []string{"daily_report", "other"} {
		if s, ok, err := history.ReadFirstSeen(context.Background(), db.Collection(history.CollectionName), id); err != nil || !ok || s.Source != history.SourceRead {
			t.Errorf("first sighting of %s: %+v, %v, %v; want one from a read", id, s, ok, err)
		}
	}
	if n, _ := db.Collection(history.CollectionName).CountDocuments(context.Background(), bson.D{{Key: "op", Value: history.OpFirstSeen}}); n != 2 {
		t.Errorf("%d first sightings, want one per job", n)
	}

	// h1 restarts after its token from before the edits: it replays them.
	h1 := ds[0]
	h1.signal(syscall.SIGTERM)
	if err := h1.wait(60 * time.Second); err != nil {
		t.Fatalf("h1 exit: %v", err)
	}
	if _, err := db.Collection("resume_tokens").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "h1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "token", Value: beforeEdits}}}}); err != nil {
		t.Fatal(err)
	}
	h1 = startDaemon(t, cfgs[0])
	h1.waitReady()
	h1.waitLog("resumed from the rewound token", func(l logLine) bool {
		return l.str("msg") == "resuming change stream from stored token" && strings.Contains(l.str("token"), beforeEdits.Lookup("_data").StringValue())
	})
	h1.waitLog("caught up after the replay", func(l logLine) bool { return l.str("msg") == msgHistoryCaughtUp })
	waitFor(t, 10*time.Second, "h1 replayed the five updates", func() bool {
		return h1.scrapeMetrics()["cronswap_change_events_total,operation=update"] >= 5
	})
	if w, dup := h1.historyOutcomes("daily_report"); w+dup != 0 {
		t.Errorf("restarted h1 recorded %d entries (%d already there) from its replay, want none", w+dup, dup)
	}
	if n, _ := db.Collection(history.CollectionName).CountDocuments(context.Background(), editsOnly); n != 5 {
		t.Fatalf("%d entries after the replay, want 5", n)
	}

	// A sixth edit: every replica, the restarted one included, computes it.
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "30 8 * * *", updated_at: new Date() } })`)
	for _, d := range []*daemon{h1, ds[1], ds[2]} {
		waitFor(t, 30*time.Second, "each replica settled the sixth entry", func() bool {
			w, dup := d.historyOutcomes("daily_report")
			if d == h1 {
				return w+dup == 1
			}
			return w+dup == 6
		})
	}
	six := append(append([]string{}, fiveEntries...), `update [cron_expr: "0 8 * * *" → "30 8 * * *"] by alice`)
	if got := historyOf(t, db, "daily_report"); strings.Join(got, "\n") != strings.Join(six, "\n") {
		t.Fatalf("history after the sixth edit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(six, "\n"))
	}

	// The command line: table newest first, JSON, unknown job.
	out := cliOK(t, cfgs[1], "schedules", "history", "daily_report")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], `cron_expr: "0 8 * * *" → "30 8 * * *"`) || !strings.HasSuffix(strings.Join(strings.Fields(lines[1]), " "), "alice -") ||
		!strings.Contains(lines[6], `cron_expr: "0 9 * * *" → "0 8 * * *"`) {
		t.Errorf("schedules history table:\n%s", out)
	}
	var views []struct {
		ID      string `json:"id"`
		Op      string `json:"op"`
		Changes []struct {
			Field  string          `json:"field"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		} `json:"changes"`
		UpdatedBy string `json:"updated_by"`
	}
	if err := json.Unmarshal([]byte(cliOK(t, cfgs[1], "schedules", "history", "daily_report", "-o", "json", "--limit", "2")), &views); err != nil {
		t.Fatal(err)
	}
	var after bytes.Buffer
	if len(views) == 2 && len(views[1].Changes) == 1 {
		_ = json.Compact(&after, views[1].Changes[0].After)
	}
	if len(views) != 2 || views[1].Changes[0].Field != "args" || views[1].Changes[0].Before != nil ||
		after.String() != `{"region":"eu","batch":500}` || views[1].UpdatedBy != "alice" {
		t.Errorf("schedules history -o json --limit 2: %+v", views)
	}
	if _, errOut, code := cli(t, cfgs[1], "schedules", "history", "no_such_job"); code != 1 || !strings.Contains(errOut, `no schedule "no_such_job"`) {
		t.Errorf("history of an unknown job: exit %d, %s", code, errOut)
	}
}
