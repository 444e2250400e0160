package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/members"
)

// members list shows every member with its heartbeat age and lease, and
// counts for each live member the jobs it owns by rendezvous hashing over
// the live members (members.OwnedCounts over every job, enabled or not,
// valid or not, as the daemon's overview counts); a dead member owns
// nothing, and a document whose _id is not a job id is no job.
func TestMembersList(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	docs := []any{
		members.Member{ID: "r1", Host: "host-1", PID: 11, Incarnation: "aaaa", StartedAt: now.Add(-time.Hour),
			FiringSince: now.Add(-time.Hour).Add(time.Second), HeartbeatAt: now.Add(-2 * time.Second), LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)},
		members.Member{ID: "r2", Host: "host-2", PID: 22, Incarnation: "bbbb", StartedAt: now.Add(-time.Hour),
			HeartbeatAt: now.Add(-time.Second), LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)},
		members.Member{ID: "r3", Host: "host-3", PID: 33, Incarnation: "cccc", StartedAt: now.Add(-2 * time.Hour),
			HeartbeatAt: now.Add(-10 * time.Minute), LeaseUntil: now.Add(-9 * time.Minute), ExpireAt: now.Add(time.Hour)},
	}
	if _, err := members.Collection(e.db).InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
	var scheds []any
	var jobIDs []string
	for i := range 300 {
		id := fmt.Sprintf("job-%03d", i)
		d := bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "@hourly"}}
		switch i % 4 {
		case 0:
			d = append(d, bson.E{Key: "enabled", Value: false})
		case 1:
			d = append(d, bson.E{Key: "enabled", Value: true})
		case 2:
			d = bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: "not cron"}}
		default: // enabled absent: enabled
		}
		jobIDs = append(jobIDs, id)
		scheds = append(scheds, d)
	}
	// Not jobs: an _id that is not a string, one too long.
	scheds = append(scheds, bson.D{{Key: "_id", Value: int32(7)}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: strings.Repeat("x", 1000)}, {Key: "cron_expr", Value: "@hourly"}})
	if _, err := e.db.Collection("schedules").InsertMany(ctx(t), scheds); err != nil {
		t.Fatal(err)
	}
	live := []members.Member{docs[0].(members.Member), docs[1].(members.Member)}
	want := members.OwnedCounts(jobIDs, live)
	// r2's engine does not fire yet: while r1 fires, r1 owns every job.
	if want["r1"] != len(jobIDs) || want["r2"] != 0 {
		t.Fatalf("owned counts %v: want r1 to own all %d jobs, r2 (not firing) none", want, len(jobIDs))
	}

	var views []map[string]any
	e.okJSON(&views, "members", "list")
	if len(views) != 3 {
		t.Fatalf("members list: %v", views)
	}
	total := 0
	for i, v := range views {
		id := v["instance_id"].(string)
		if id != fmt.Sprintf("r%d", i+1) {
			t.Fatalf("row %d is %s: want sorted by instance id", i, id)
		}
		owned := int(v["owned_jobs"].(float64))
		total += owned
		switch id {
		case "r3":
			if v["live"] != false || owned != 0 || v["lease_left_seconds"].(float64) > -500 {
				t.Errorf("dead r3: %v", v)
			}
		default:
			if v["live"] != true || owned != want[id] {
				t.Errorf("%s owns %d, want %d: %v", id, owned, want[id], v)
			}
			if age := v["heartbeat_age_seconds"].(float64); age < 0.5 || age > 60 {
				t.Errorf("%s heartbeat age %v", id, age)
			}
		}
		if firing, _ := v["firing_since"].(string); (id == "r1") != (firing != "") {
			t.Errorf("%s: firing_since %v, want it set for r1 only (the only one whose engine fires)", id, v["firing_since"])
		}
		if v["host"] != fmt.Sprintf("host-%d", i+1) || v["incarnation"] == "" {
			t.Errorf("row %v", v)
		}
	}
	if total != len(jobIDs) {
		t.Errorf("owned jobs sum to %d, want the %d jobs", total, len(jobIDs))
	}

	r := e.ok("members", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "INCARNATION") || !strings.Contains(lines[0], "OWNED JOBS") {
		t.Fatalf("table:\n%s", r.stdout)
	}
	if !strings.Contains(lines[1], "aaaa") || !strings.Contains(lines[1], fmt.Sprint(want["r1"])) ||
		!strings.Contains(lines[3], "passed") || !strings.HasSuffix(strings.TrimSpace(lines[3]), "-") {
		t.Errorf("table:\n%s", r.stdout)
	}
}

func TestMembersListEmpty(t *testing.T) {
	e := newEnv(t)
	var views []map[string]any
	e.okJSON(&views, "members", "list")
	if len(views) != 0 {
		t.Fatalf("members list on an empty database: %v", views)
	}
}
