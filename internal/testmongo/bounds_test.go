package testmongo_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// oplogStats is the launcher's {cronswapOplogStats: 1}.
type oplogStats struct {
	Entries    int  `bson:"entries"`
	MaxEntries int  `bson:"maxEntries"`
	Persisted  *int `bson:"persisted"`
}

func readOplogStats(t *testing.T, c context.Context, client *mongo.Client) oplogStats {
	t.Helper()
	var s oplogStats
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "cronswapOplogStats", Value: 1}}).Decode(&s); err != nil {
		t.Fatalf("cronswapOplogStats: %v", err)
	}
	return s
}

// TestTTLMonitorDeletesExpiredDocuments: with --ttl-monitor-secs 1 the server deletes what its TTL indexes expired
// (a date field, or an array holding one, older than expireAfterSeconds), as a real server's TTL monitor does every
// 60 s, and change streams see ordinary delete events; documents not yet expired, or whose field is no date, stay.
// In memory and with an H2 file.
func TestTTLMonitorDeletesExpiredDocuments(t *testing.T) {
	managed(t)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			c := ctx(t, 120*time.Second)
			opts := testmongo.Options{ExtraArgs: []string{"--ttl-monitor-secs", "1"}}
			if h2 {
				opts.H2File = filepath.Join(t.TempDir(), "mongo.h2")
			}
			srv, err := testmongo.Start(c, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Stop() })
			db := testmongo.ClientFor(t, srv.URI).Database("cronswap")
			runs, members := db.Collection("job_runs"), db.Collection("members")
			if _, err := runs.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "expire_at", Value: 1}},
				Options: options.Index().SetExpireAfterSeconds(0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := members.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "seen_at", Value: 1}},
				Options: options.Index().SetExpireAfterSeconds(3600)}); err != nil {
				t.Fatal(err)
			}
			cs, err := db.Watch(c, mongo.Pipeline{})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close(context.Background())

			now := time.Now()
			if _, err := runs.InsertMany(c, []any{
				doc("past", "expire_at", now.Add(-time.Hour)),
				doc("future", "expire_at", now.Add(time.Hour)),
				doc("array", "expire_at", bson.A{now.Add(time.Hour), now.Add(-time.Minute)}),
				doc("string", "expire_at", "2000-01-01"),
				doc("none"),
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := members.InsertMany(c, []any{
				doc("gone", "seen_at", now.Add(-2*time.Hour)),
				doc("live", "seen_at", now.Add(-10*time.Minute)),
			}); err != nil {
				t.Fatal(err)
			}
			var deletes []string
			for len(deletes) < 3 {
				ev := next(t, cs, 30*time.Second)
				if opType(ev) == "delete" {
					deletes = append(deletes, ev.Lookup("ns", "coll").StringValue()+"/"+ev.Lookup("documentKey", "_id").StringValue())
				}
			}
			sort.Strings(deletes)
			if want := []string{"job_runs/array", "job_runs/past", "members/gone"}; !slices.Equal(deletes, want) {
				t.Fatalf("TTL deletes %q, want %q", deletes, want)
			}
			// two more passes (serverStatus metrics.ttl.passes, as on a real server): nothing else expires
			passes := readTTLMetrics(t, c, db.Client()).Passes
			for deadline := time.Now().Add(30 * time.Second); readTTLMetrics(t, c, db.Client()).Passes < passes+2; {
				if time.Now().After(deadline) {
					t.Fatalf("no two TTL passes after %d within 30s", passes)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := runs.InsertOne(c, doc("sentinel")); err != nil {
				t.Fatal(err)
			}
			if ev := next(t, cs, 10*time.Second); opType(ev) != "insert" || ev.Lookup("documentKey", "_id").StringValue() != "sentinel" {
				t.Fatalf("after the expired documents, got %s, want the sentinel's insert", extJSON(t, ev))
			}
			for coll, want := range map[*mongo.Collection][]string{runs: {"future", "none", "sentinel", "string"}, members: {"live"}} {
				var got []string
				cur, err := coll.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
				if err != nil {
					t.Fatal(err)
				}
				for cur.Next(c) {
					got = append(got, cur.Current.Lookup("_id").StringValue())
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s keeps %q, want %q", coll.Name(), got, want)
				}
			}
		})
	}
}

// ttlMetrics reads serverStatus's metrics.ttl: a server's passes and deletedDocuments, and this server's own
// cronswapExaminedLocked (documents the TTL deletions examined while holding the write lock).
type ttlMetrics struct {
	Passes         int64 `bson:"passes"`
	Deleted        int64 `bson:"deletedDocuments"`
	ExaminedLocked int64 `bson:"cronswapExaminedLocked"`
}

func readTTLMetrics(t *testing.T, c context.Context, client *mongo.Client) ttlMetrics {
	t.Helper()
	var status struct {
		Metrics struct {
			TTL ttlMetrics `bson:"ttl"`
		} `bson:"metrics"`
	}
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&status); err != nil {
		t.Fatalf("serverStatus: %v", err)
	}
	return status.Metrics.TTL
}

// TestTTLPassScansWithoutTheWriteLock: a TTL pass looks for expired documents as a streamed find reads, under the
// read lock a step at a time, and holds the write lock only to delete what it found, by _id, a batch at a time (a
// server walks its TTL index and yields; a pass that held the write lock over its scan stopped every client for
// two seconds a minute at a million history entries). 2,500 expired documents among 20,000 live ones: all are
// deleted, in more than one batch, the live ones stay, and the deletions examined exactly the expired documents.
func TestTTLPassScansWithoutTheWriteLock(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	srv, err := testmongo.Start(c, testmongo.Options{ExtraArgs: []string{"--ttl-monitor-secs", "1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	client := testmongo.ClientFor(t, srv.URI)
	runs := client.Database("cronswap").Collection("job_runs")
	if _, err := runs.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "expire_at", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(0)}); err != nil {
		t.Fatal(err)
	}
	const live, expired = 20000, 2500
	now := time.Now()
	docs := make([]any, 0, live+expired)
	for i := range live + expired {
		at := now.Add(time.Hour)
		if i%9 == 0 && i/9 < expired {
			at = now.Add(-time.Hour)
		}
		docs = append(docs, doc(fmt.Sprintf("r%05d", i), "expire_at", at))
	}
	if _, err := runs.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := readTTLMetrics(t, c, client)
		if m.Deleted >= expired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TTL metrics %+v after 60s, want %d deleted", m, expired)
		}
	}
	m := readTTLMetrics(t, c, client)
	if m.Deleted != expired || m.ExaminedLocked != expired {
		t.Errorf("TTL metrics %+v: want %d deleted, and as many examined under the write lock (not the %d scanned)",
			m, expired, live+expired)
	}
	if n, err := runs.CountDocuments(c, bson.D{}); err != nil || n != live {
		t.Errorf("job_runs keeps %d (%v), want the %d live", n, err, live)
	}
	if n, err := runs.CountDocuments(c, bson.D{{Key: "expire_at", Value: bson.D{{Key: "$lt", Value: now}}}}); err != nil || n != 0 {
		t.Errorf("%d expired documents left (%v)", n, err)
	}
}

// TestBoundedOplogH2 bounds an H2 server's oplog to 50 entries: it never holds more (in memory and in the file),
// also across a restart; a resume token older than the bound gets 286 (ChangeStreamHistoryLost), before and after
// the restart, while a token from the newest entries is honoured across the restart. Without the flag the bound
// is the launcher's default for H2.
func TestBoundedOplogH2(t *testing.T) {
	managed(t)
	c := ctx(t, 120*time.Second)
	file := filepath.Join(t.TempDir(), "mongo.h2")
	srv, err := testmongo.Start(c, testmongo.Options{H2File: file, ExtraArgs: []string{"--oplog-max-entries", "50"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	client := testmongo.ClientFor(t, srv.URI)
	coll, old := tokenAfterInsert(t, c, srv.URI)
	for i := range 120 {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: fmt.Sprintf("w%03d", i)}}); err != nil {
			t.Fatal(err)
		}
		if s := readOplogStats(t, c, client); s.Entries > 50 || s.Persisted == nil || *s.Persisted != s.Entries || s.MaxEntries != 50 {
			t.Fatalf("after %d writes: %+v (persisted %v), want at most 50 entries, all persisted", i+1, s, s.Persisted)
		}
	}
	_, recent := insertAndWatch(t, c, coll, "recent")
	if _, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(old)); !serverError(t, err).HasErrorCode(286) {
		t.Fatalf("resume from before the bound: want 286 ChangeStreamHistoryLost, got %v", err)
	}

	if err := srv.Restart(c); err != nil {
		t.Fatal(err)
	}
	_, err = resumeWhenBack(c, coll, old)
	if !serverError(t, err).HasErrorCode(286) {
		t.Fatalf("after a restart, resume from before the bound: want 286, got %v", err)
	}
	cs, err := resumeWhenBack(c, coll, recent)
	if err != nil {
		t.Fatalf("after a restart, resume from a recent token: %v", err)
	}
	defer cs.Close(context.Background())
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "after-restart"}}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, cs, 10*time.Second); ev.Lookup("documentKey", "_id").StringValue() != "after-restart" {
		t.Fatalf("resumed across the restart and got %s", extJSON(t, ev))
	}
	if s := readOplogStats(t, c, client); s.Entries > 50 || s.Persisted == nil || *s.Persisted != s.Entries {
		t.Fatalf("after the restart: %+v, want at most 50 entries, all persisted", s)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	// the same file without the flag: the default bound
	dflt, err := testmongo.Start(c, testmongo.Options{H2File: file})
	if err != nil {
		t.Fatal(err)
	}
	defer dflt.Stop()
	if s := readOplogStats(t, c, testmongo.ClientFor(t, dflt.URI)); s.MaxEntries != 20_000 {
		t.Fatalf("default bound with an H2 file: %+v, want 20000 (the launcher's DEFAULT_H2_OPLOG_MAX_ENTRIES)", s)
	}
}

// TestInsertReplyCountsInserted: an insert command's n (a bulk write's InsertedCount) counts the documents
// inserted, not those it was given.
func TestInsertReplyCountsInserted(t *testing.T) {
	client := testmongo.Client(t)
	coll := testmongo.NewDatabase(t, client).Collection("c")
	c := ctx(t, 30*time.Second)
	if _, err := coll.InsertOne(c, doc("a")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ordered bool
		want    int64
	}{{true, 1}, {false, 2}} {
		res, err := coll.BulkWrite(c, []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(doc(fmt.Sprintf("x%v", tc.ordered))),
			mongo.NewInsertOneModel().SetDocument(doc("a")),
			mongo.NewInsertOneModel().SetDocument(doc(fmt.Sprintf("y%v", tc.ordered))),
		}, options.BulkWrite().SetOrdered(tc.ordered))
		if !mongo.IsDuplicateKeyError(err) {
			t.Fatalf("ordered=%v: want a duplicate key error, got %v", tc.ordered, err)
		}
		if res.InsertedCount != tc.want {
			t.Errorf("ordered=%v: InsertedCount %d, want %d", tc.ordered, res.InsertedCount, tc.want)
		}
	}
}
