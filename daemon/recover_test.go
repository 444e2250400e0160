package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/schedulesink"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// Last known good across a restart without a state file: a job that ran
// on a valid expression and was then edited to a bad one is armed, after
// the restart, on the last valid version the edit history reconstructs,
// fires on it, and shows the current document's error; a job with no
// valid version in the history (refused from its insert, or whose edits
// were never recorded) stays unarmed, and the log says why.
func TestRestartArmsTheLastValidVersionFromTheHistory(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	ctx := context.Background()
	coll := db.Collection(schedule.CollectionName)
	// "unrecorded" is there before the first start: its insert is found
	// by the full read, not recorded, and its bad edit is made while no
	// daemon runs: the history holds nothing of it.
	insertSchedules(t, db, "unrecorded")

	opts := testOptions()
	// "never" is refused from its insert: the history holds no valid
	// version of it.
	runThroughABadEdit(t, db, opts, bson.D{{Key: "_id", Value: "never"}, {Key: "cron_expr", Value: "bogus"}, {Key: "job", Value: "tick"}})
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "unrecorded"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "bogus"}}}}); err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	opts.InstanceID = "daemon-test-2"
	d2 := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "lkg armed again after the restart", func() bool { return armed(d2.engine, "lkg") })
	st, _ := d2.engine.Get("lkg")
	if st.CronExpr != "* * * * * *" || !strings.Contains(st.LastError, "bogus") {
		t.Errorf("lkg after the restart: %+v, want armed on \"* * * * * *\" with the bad document's error", st)
	}
	code, body := d2.get(t, "/api/schedules/lkg")
	var row struct {
		Armed     bool   `json:"armed"`
		CronExpr  string `json:"cron_expr"`
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal(body, &row); code != http.StatusOK || err != nil || !row.Armed || row.CronExpr != "* * * * * *" || row.LastError == "" {
		t.Errorf("/api/schedules/lkg: %d %s, want armed on the last valid timing with last_error", code, body)
	}
	code, body = d2.get(t, "/api/schedules/lkg/detail")
	var detail struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &detail); code != http.StatusOK || err != nil || detail.Status != "error" {
		t.Errorf("/api/schedules/lkg/detail: %d %s, want status error", code, body)
	}
	waitFor(t, 30*time.Second, "lkg fired on its last valid timing after the restart", func() bool {
		for _, r := range runsOf(t, db, "lkg", restarted) {
			if r.Instance == "daemon-test-2" && r.Status != record.StatusMissed {
				return true
			}
		}
		return false
	})
	if l, ok := d2.logs.find(func(l map[string]any) bool {
		return l["msg"] == schedulesink.MsgRecovered && l["job_id"] == "lkg"
	}); !ok || l["updated_at"] == nil || l["replaced_at"] == nil {
		t.Errorf("recovery log line %v, want one naming job_id lkg with updated_at and replaced_at", l)
	}
	// The recovered version is not an edit.
	if n := editsOf(t, db, "lkg"); n != 2 {
		t.Errorf("lkg has %d edits after the restart, want 2 (the insert and the bad edit)", n)
	}

	for id, reason := range map[string]string{"never": reasonNoValidVersion, "unrecorded": reasonNoEdits} {
		if st, ok := d2.engine.Get(id); !ok || st.Armed || st.LastError == "" {
			t.Errorf("%s: %+v, want known, unarmed, with its error", id, st)
		}
		if _, ok := d2.logs.find(func(l map[string]any) bool {
			return l["msg"] == msgNotRecovered && l["job_id"] == id && l["reason"] == reason
		}); !ok {
			t.Errorf("no %q line for %s with reason %s", msgNotRecovered, id, reason)
		}
		if _, ok := d2.logs.find(func(l map[string]any) bool {
			return strings.Contains(l["msg"].(string), "last known good kept") && l["job_id"] == id
		}); ok {
			t.Errorf("%s: the log says its last known good was kept; it has none", id)
		}
	}
}

// editsOf counts job id's edits in the history.
func editsOf(t *testing.T, db *mongo.Database, id string) int64 {
	t.Helper()
	n, err := db.Collection(history.CollectionName).CountDocuments(context.Background(), history.EditsOf(id))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runThroughABadEdit starts a daemon on db with opts, inserts job "lkg"
// on a valid expression and edits it to a bad one while the edit history
// records both, and stops the daemon: the history then holds the job's
// last valid version, the collection (and a state file, if opts sets one)
// the bad document. The documents of also are inserted after lkg while
// the history records, each awaited as one edit.
func runThroughABadEdit(t *testing.T, db *mongo.Database, opts Options, also ...bson.D) {
	t.Helper()
	ctx := context.Background()
	coll := db.Collection(schedule.CollectionName)
	d := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "the history recording", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "schedule history recording: stream caught up" })
		return ok
	})
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "lkg"}, {Key: "cron_expr", Value: "* * * * * *"},
		{Key: "job", Value: "tick"}, {Key: "updated_at", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range also {
		if _, err := coll.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "lkg armed", func() bool { return armed(d.engine, "lkg") })
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "lkg"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cron_expr", Value: "bogus"}, {Key: "updated_at", Value: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the bad edit recorded and refused, lkg still armed", func() bool {
		st, ok := d.engine.Get("lkg")
		if !ok || !st.Armed || st.LastError == "" || editsOf(t, db, "lkg") != 2 {
			return false
		}
		for _, doc := range also {
			if id, _ := doc[0].Value.(string); editsOf(t, db, id) != 1 {
				return false
			}
		}
		return true
	})
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
}

// A full read that finds a refused job with no valid version while the
// edit history cannot be read (every find on it failed by the server)
// leaves the job unarmed, with its error, and says so with the reason
// history_unreachable and the read's error; the daemon runs on and is
// ready. The history does hold a valid version: only the failed read
// keeps it from being armed.
func TestRestartWithTheHistoryUnreachableLeavesTheRefusedJobUnarmed(t *testing.T) {
	proxy, client := testmongo.ProxiedClient(t)
	db := testmongo.NewDatabase(t, client)
	opts := testOptions()
	runThroughABadEdit(t, db, opts)

	const refusal = "history read refused by the test"
	proxy.FailAlways(faultproxy.All(faultproxy.CommandName("find"), faultproxy.Collection(history.CollectionName)),
		faultproxy.ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: refusal})
	opts.InstanceID = "daemon-test-2"
	d := startDaemon(t, db, opts)
	waitFor(t, 30*time.Second, "the job not recovered, for want of the history", func() bool {
		_, ok := d.logs.find(func(l map[string]any) bool {
			return l["msg"] == msgNotRecovered && l["job_id"] == "lkg" && l["reason"] == reasonHistoryUnreachable
		})
		return ok
	})
	// (The first sightings' writes read the history too, and retry; they
	// go through from here on.)
	proxy.ClearFailures()
	l, _ := d.logs.find(func(l map[string]any) bool { return l["msg"] == msgNotRecovered && l["job_id"] == "lkg" })
	if e, _ := l["error"].(string); l["level"] != "WARN" || !strings.Contains(e, refusal) {
		t.Errorf("not-recovered line %v, want a warning with the history read's error", l)
	}
	waitFor(t, 30*time.Second, "ready", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK
	})
	if st, ok := d.engine.Get("lkg"); !ok || st.Armed || !strings.Contains(st.LastError, "bogus") {
		t.Errorf("lkg: %+v, want known, unarmed, with the bad document's error", st)
	}
	if _, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == schedulesink.MsgRecovered }); ok {
		t.Error("a job was logged recovered though the history could not be read")
	}
}

// Last known good across a warm restart: the state file saved as the
// daemon stopped holds the job's bad document, and the daemon started
// again from it arms the job on the last valid version the edit history
// holds, with the bad document's error. It stays so whether the stream
// then resumes after the stored token or the server refuses the token
// (a full reload of the collection follows, which finds the job as the
// engine has it).
func TestWarmRestartArmsTheLastValidVersionFromTheHistory(t *testing.T) {
	for _, tc := range []struct {
		name         string
		refuseToken  bool
		reloadReason string
	}{
		{name: "resumed"},
		{name: "token_refused", refuseToken: true, reloadReason: changestream.ReasonTokenRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, client := testmongo.ProxiedClient(t)
			db := testmongo.NewDatabase(t, client)
			opts := testOptions()
			opts.StateFile = filepath.Join(t.TempDir(), "cronswap.state")
			runThroughABadEdit(t, db, opts)
			if doc := stateFileDocument(t, opts, db, "lkg"); doc == nil || doc.Lookup("cron_expr").StringValue() != "bogus" {
				t.Fatalf("state file's lkg document %v, want the bad one", doc)
			}

			if tc.refuseToken {
				proxy.FailNext(faultproxy.All(faultproxy.IsChangeStreamAggregate, faultproxy.Collection(schedule.CollectionName)),
					faultproxy.ErrorReply{Code: 286, CodeName: "ChangeStreamHistoryLost",
						Errmsg: "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
						Labels: []string{"NonResumableChangeStreamError"}})
			}
			restarted := time.Now()
			d := startDaemon(t, db, opts) // the same instance: its token and state file
			waitFor(t, 30*time.Second, "armed from the state file", func() bool {
				_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "armed from state file" })
				return ok
			})
			if tc.reloadReason != "" {
				waitFor(t, 30*time.Second, "a full reload for "+tc.reloadReason, func() bool {
					_, ok := d.logs.find(func(l map[string]any) bool { return l["msg"] == "full reload" && l["reason"] == tc.reloadReason })
					return ok
				})
			}
			waitFor(t, 30*time.Second, "ready", func() bool {
				code, _ := d.get(t, "/readyz")
				return code == http.StatusOK
			})
			if st, ok := d.engine.Get("lkg"); !ok || !st.Armed || st.CronExpr != "* * * * * *" || !strings.Contains(st.LastError, "bogus") {
				t.Errorf("lkg after the warm restart: %+v, want armed on \"* * * * * *\" with the bad document's error", st)
			}
			if l, ok := d.logs.find(func(l map[string]any) bool {
				return l["msg"] == schedulesink.MsgRecovered && l["job_id"] == "lkg"
			}); !ok || l["replaced_at"] == nil {
				t.Errorf("recovery log line %v, want one naming job_id lkg with replaced_at", l)
			}
			if tc.reloadReason == "" {
				if l, ok := d.logs.find(func(l map[string]any) bool {
					return l["msg"] == "full reload" && l["collection"] == schedule.CollectionName
				}); ok {
					t.Errorf("a warm restart that resumed read the collection: %v", l)
				}
			}
			waitFor(t, 30*time.Second, "lkg fired on its last valid timing after the restart", func() bool {
				for _, r := range runsOf(t, db, "lkg", restarted) {
					if r.Status != record.StatusMissed {
						return true
					}
				}
				return false
			})
			if n := editsOf(t, db, "lkg"); n != 2 {
				t.Errorf("lkg has %d edits after the restart, want 2 (the insert and the bad edit)", n)
			}
		})
	}
}

// stateFileDocument returns job id's document in the state file opts
// sets for db, nil if it holds none.
func stateFileDocument(t *testing.T, opts Options, db *mongo.Database, id string) bson.Raw {
	t.Helper()
	st, err := statefile.New(opts.StateFile, statefile.Options{
		WatcherID: opts.InstanceID, Source: db.Name() + "." + schedule.CollectionName,
	}).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var found bson.Raw
	for d, err := range st.Docs {
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := d.Lookup("_id").StringValueOK(); ok && v == id {
			found = slices.Clone(d)
		}
	}
	return found
}
