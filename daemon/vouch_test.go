package daemon

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/schedule"
)

// proxiedDatabase returns a fresh database of the shared test server
// (direct), the same database through a fault proxy (through, for the
// daemon under test) and the proxy.
func proxiedDatabase(t *testing.T) (direct, through *mongo.Database, p *faultproxy.Proxy) {
	t.Helper()
	direct = testmongo.NewDatabase(t, testmongo.Client(t))
	p, client := testmongo.ProxiedClient(t)
	return direct, client.Database(direct.Name()), p
}

// countDecidedReads makes p note the job ids of every read of the decided
// slots (isDecidedRead) that passes through it, failing none; the
// function returned gives them, each sorted, in the order sent.
func countDecidedReads(p *faultproxy.Proxy) func() [][]string {
	var mu sync.Mutex
	var reads [][]string
	p.FailAlways(func(cmd bsoncore.Document) bool {
		if isDecidedRead(cmd) {
			ids := decidedReadIDs(cmd)
			slices.Sort(ids)
			mu.Lock()
			reads = append(reads, ids)
			mu.Unlock()
		}
		return false
	}, faultproxy.ErrorReply{})
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reads)
	}
}

// vouchEnv is a daemon (r1, every job armed) starting beside g1, a member
// that is a document only: it fires (firing_since) and does not divide,
// and heartbeated 2 s before the start. Each of the every-second jobs was last
// decided 4 s before r1 starts (its lock's last_slot), as if g1 had fired
// them until then.
type vouchEnv struct {
	db      *mongo.Database
	d       *running
	ids     []string
	decided time.Time
	reads   func() [][]string
	g1      members.Member
	proxy   *faultproxy.Proxy
}

func newVouchEnv(t *testing.T, g1Lease time.Duration) *vouchEnv {
	t.Helper()
	db, through, p := proxiedDatabase(t)
	e := &vouchEnv{db: db, reads: countDecidedReads(p), proxy: p}
	now := time.Now()
	e.g1 = members.Member{ID: "g1", Host: "ghost", PID: 1, Incarnation: "ghost-g1", StartedAt: now.Add(-time.Minute),
		FiringSince: now.Add(-time.Minute), HeartbeatAt: now.Add(-2 * time.Second), LeaseUntil: now.Add(g1Lease), ExpireAt: now.Add(2 * time.Hour)}
	if _, err := db.Collection(members.CollectionName).InsertOne(context.Background(), e.g1); err != nil {
		t.Fatal(err)
	}
	e.decided = now.Truncate(time.Second).Add(-4 * time.Second)
	for _, id := range []string{"v1", "v2", "v3", "v4", "v5", "v6"} {
		e.ids = append(e.ids, id)
		if _, err := db.Collection(schedule.CollectionName).InsertOne(context.Background(), bson.D{{Key: "_id", Value: id},
			{Key: "cron_expr", Value: "* * * * * *"}, {Key: "job", Value: "tick"},
			{Key: "updated_at", Value: now.Add(-time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		// g1's run of the decided slot and its lock, as its claim left them.
		if _, err := db.Collection(record.RunsCollection).InsertOne(context.Background(), record.RunDoc{
			ID: record.RunID(id, e.decided), JobID: id, ScheduledAt: e.decided, Instance: "g1", Incarnation: "ghost-g1",
			Status: record.StatusSucceeded, StartedAt: e.decided, EndedAt: e.decided.Add(time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Collection(record.LocksCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: id},
			{Key: "state", Value: record.LockFree}, {Key: "last_slot", Value: e.decided},
			{Key: "updated_at", Value: e.decided}}); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions()
	opts.InstanceID = "r1"
	opts.MembersHeartbeat, opts.MembersLease = time.Second, 3*time.Second
	opts.ClaimGrace = 100 * time.Millisecond
	e.d = startDaemon(t, through, opts)
	waitFor(t, 30*time.Second, "r1 firing", func() bool { return !e.d.service.members.Self().FiringSince.IsZero() })
	return e
}

// coveredUntil waits until every slot of the every-second job id after
// from and up to until ran or is recorded missed in db, and returns how
// many are recorded missed no_replica_running.
func coveredUntil(t *testing.T, db *mongo.Database, id string, from, until time.Time) (noReplica int) {
	t.Helper()
	var holes []time.Time
	waitFor(t, 30*time.Second, id+": every slot after "+from.Format(time.TimeOnly)+" ran or is recorded missed", func() bool {
		covered := map[int64]bool{}
		noReplica = 0
		for _, r := range runsOf(t, db, id, time.Time{}) {
			last := r.ScheduledAt
			switch r.Status {
			case record.StatusRunning, record.StatusClaiming:
				continue
			case record.StatusMissed:
				if !r.LastScheduledAt.IsZero() {
					last = r.LastScheduledAt
				}
				if r.Reason == record.MissedNoReplica {
					noReplica += int(r.Count)
				}
			}
			for s := r.ScheduledAt; !s.After(last); s = s.Add(time.Second) {
				covered[s.Unix()] = true
			}
		}
		holes = holes[:0]
		for s := from.Truncate(time.Second).Add(time.Second); !s.After(until); s = s.Add(time.Second) {
			if !covered[s.Unix()] {
				holes = append(holes, s)
			}
		}
		return len(holes) == 0
	})
	return noReplica
}

// heartbeat writes g1's heartbeat at now, its lease a minute on.
func (e *vouchEnv) heartbeat(t *testing.T) {
	t.Helper()
	now := time.Now()
	if _, err := e.db.Collection(members.CollectionName).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "g1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "heartbeat_at", Value: now}, {Key: "lease_until", Value: now.Add(time.Minute)}}}}); err != nil {
		t.Fatal(err)
	}
}

// A replica starting while another fires every job reads no decided slot
// at start-up: the other decided them all meanwhile. Once that member has
// heartbeated after this engine fired, nothing is read later either, and
// no slot is recorded missed.
func TestStartupReadLeftOutWhileAnotherMemberFires(t *testing.T) {
	e := newVouchEnv(t, time.Hour)
	// r1 fires: its start-up read, if any, was sent before.
	if reads := e.reads(); len(reads) != 0 {
		t.Errorf("%d reads of the decided slots at start-up (%v), want none: g1 fires every job", len(reads), reads)
	}
	if _, ok := e.d.logs.find(func(r map[string]any) bool {
		return r["msg"] == "start-up: other members fire already; the decided slots are read only for the jobs none of them arms" &&
			r["firing"] == "g1" && r["asked"] == float64(0)
	}); !ok {
		t.Error("no start-up log naming g1 as firing and 0 jobs asked for")
	}
	e.heartbeat(t)
	waitFor(t, 30*time.Second, "g1 confirmed", func() bool {
		_, ok := e.d.logs.find(func(r map[string]any) bool {
			return r["msg"] == "start-up: the members that fired when this one started heartbeated since it fired"
		})
		return ok
	})
	if reads := e.reads(); len(reads) != 0 {
		t.Errorf("%d reads of the decided slots (%v), want none: g1 heartbeated after r1 fired", len(reads), reads)
	}
	for _, id := range e.ids {
		for _, r := range runsOf(t, e.db, id, time.Time{}) {
			if r.Status == record.StatusMissed {
				t.Errorf("%s: %d slots from %s recorded missed (%s), want none", id, r.Count, r.ScheduledAt, r.Reason)
			}
		}
	}
	// The start-up gap's own read is unchanged without a firing member:
	// TestStartupGapWaitsForTheDecidedSlots and the hand-over tests.
}

// A member that vouched for the jobs at start-up but is gone without a
// heartbeat since this engine fired may have died before it: the slots
// after each job's last decided one and before this engine's first are
// then recorded missed as the start-up gap records them
// (no_replica_running), so every slot ran or is on record.
// Without that (or with the decided slots read after this engine's claims
// moved each job on), those slots would have no record at all.
func TestVoucherGoneWithoutAHeartbeatRecordsTheGap(t *testing.T) {
	e := newVouchEnv(t, 3*time.Second)
	// Slots up to 2 s before g1's lease passes (r1 fires those after them).
	until := e.g1.LeaseUntil.Truncate(time.Second).Add(-2 * time.Second)
	for _, id := range e.ids {
		if n := coveredUntil(t, e.db, id, e.decided, until); n == 0 {
			t.Errorf("%s: no slot recorded missed no_replica_running; the slots between %s and r1's first fire were lost", id, e.decided)
		}
	}
	if _, ok := e.d.logs.find(func(r map[string]any) bool {
		return r["msg"] == "start-up: members that fired when this one started are gone without a heartbeat since it fired; the slots their jobs may have lost before this engine fired are looked for" &&
			r["gone"] == "g1" && r["jobs"] == float64(len(e.ids))
	}); !ok {
		t.Error("no log of g1 found gone with its 6 jobs")
	}
	if n := len(e.reads()); n == 0 {
		t.Error("no read of the decided slots after g1 was gone")
	}
}

// When the decided slots cannot be read after a voucher is gone, the
// slots since it was last seen alive (less the claim grace and a tick) are
// recorded missed no_replica_running instead: every slot after g1's last
// heartbeat ran or is on record. Without that, the failed read left them
// with no record (only a log line).
func TestVoucherGoneAndTheReadFailingRecordsTheGap(t *testing.T) {
	e := newVouchEnv(t, 3*time.Second)
	e.proxy.FailAlways(isDecidedRead, faultproxy.ErrorReply{})
	// The slots from g1's last heartbeat to r1's first fire had no replica.
	until := e.d.service.members.Self().FiringSince.Truncate(time.Second)
	waitFor(t, 60*time.Second, "the failed read logged", func() bool {
		_, ok := e.d.logs.find(func(r map[string]any) bool {
			return r["msg"] == "start-up: could not read the decided slots of some jobs; their slots since the gone members were last seen alive are recorded missed"
		})
		return ok
	})
	for _, id := range e.ids {
		if n := coveredUntil(t, e.db, id, e.g1.HeartbeatAt, until); n == 0 {
			t.Errorf("%s: no slot recorded missed no_replica_running after the read failed", id)
		}
	}
}
