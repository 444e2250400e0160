package runstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// faultReplica is a store whose client goes through its own fault proxy.
type faultReplica struct {
	replica
	proxy *faultproxy.Proxy
}

// faultReplicas returns n replicas on one database, each through its own
// proxy, and a direct view of the database's collections.
func faultReplicas(t *testing.T, n int) ([]faultReplica, storeEnv) {
	t.Helper()
	e := newStoreEnv(t)
	var out []faultReplica
	for k := range n {
		p, client := testmongo.ProxiedClient(t)
		locks, runs := record.Collections(client.Database(e.db.Name()))
		inst := fmt.Sprintf("r%d", k)
		s := New(locks, runs, Options{Instance: inst, Logger: slog.New(slog.DiscardHandler)})
		out = append(out, faultReplica{replica{s, inst, inst + "-1"}, p})
	}
	return out, e
}

// Matchers of the two steps of a claim batch.
var (
	runsInsert  = faultproxy.All(faultproxy.CommandName("insert"), faultproxy.Collection(record.RunsCollection))
	locksUpdate = faultproxy.All(faultproxy.CommandName("update"), faultproxy.Collection(record.LocksCollection))
)

var (
	notWritablePrimary = faultproxy.ErrorReply{Code: 10107, CodeName: "NotWritablePrimary", Errmsg: "not primary"}
	replStateChange    = faultproxy.ErrorReply{Code: 11602, CodeName: "InterruptedDueToReplStateChange",
		Errmsg: "operation was interrupted because of a replica set state change"}
)

// Two replicas claim the same 1,000 fires (forbid jobs, free locks) while
// faults hit the middle of their batches: a connection cut before the
// command is sent on, a cut after the server applied it (its answer lost),
// NotWritablePrimary and InterruptedDueToReplStateChange on the insert of
// job_runs and on the bulk update of job_locks. Never do both win a fire;
// each fire is won by exactly one of them or reported with Err; a fire
// reported with ErrOutcomeUnknown and disowned is left a missed record,
// never a running one.
func TestClaimBatchMidBatchFaults(t *testing.T) {
	const n = 1000
	cases := []struct {
		name string
		arm  func(a, b *faultproxy.Proxy)
		// short: the claimers' context is short, and the faults keep
		// coming until it ends, so some outcomes stay unknown.
		short bool
	}{
		{"cut insert", func(a, b *faultproxy.Proxy) { a.CutNext(runsInsert) }, false}, // the insert is always sent: it hits
		{"cut insert after apply", func(a, b *faultproxy.Proxy) { a.CutAfterNext(runsInsert); b.CutAfterNext(runsInsert) }, false},
		{"10107 insert", func(a, b *faultproxy.Proxy) { a.FailNext(runsInsert, notWritablePrimary) }, false},
		{"11602 insert both", func(a, b *faultproxy.Proxy) {
			a.FailNext(runsInsert, replStateChange)
			b.FailNext(runsInsert, replStateChange)
		}, false},
		{"cut lock update", func(a, b *faultproxy.Proxy) { a.CutNext(locksUpdate); b.CutNext(locksUpdate) }, false},
		{"cut lock update after apply", func(a, b *faultproxy.Proxy) { a.CutAfterNext(locksUpdate); b.CutAfterNext(locksUpdate) }, false},
		{"10107 lock update", func(a, b *faultproxy.Proxy) {
			a.FailNext(locksUpdate, notWritablePrimary)
			b.FailNext(locksUpdate, notWritablePrimary)
		}, false},
		{"11602 lock update both", func(a, b *faultproxy.Proxy) {
			a.FailNext(locksUpdate, replStateChange)
			b.FailNext(locksUpdate, replStateChange)
		}, false},
		{"insert applied then unreachable", func(a, b *faultproxy.Proxy) {
			a.CutAfterNext(runsInsert)
			a.FailAlways(faultproxy.Collection(record.RunsCollection), notWritablePrimary)
		}, true},
		{"lock update keeps failing", func(a, b *faultproxy.Proxy) {
			a.FailAlways(locksUpdate, replStateChange)
			b.FailAlways(locksUpdate, replStateChange)
		}, true},
		{"lock update applied then unreachable", func(a, b *faultproxy.Proxy) {
			for _, p := range []*faultproxy.Proxy{a, b} {
				p.CutAfterNext(locksUpdate)
				p.FailAlways(faultproxy.Collection(record.LocksCollection), notWritablePrimary)
			}
		}, true},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			reps, e := faultReplicas(t, 2)
			slot := base
			fires := make([]record.FireClaim, n)
			for i := range fires {
				fires[i] = forbid(fmt.Sprintf("j%04d", i), slot)
			}
			// Warm the connections up, so the faults hit the batch.
			for _, r := range reps {
				r.claim(t, slot, time.Minute, forbid("warm-"+r.inst, slot))
				r.proxy.ResetStats()
			}
			tc.arm(reps[0].proxy, reps[1].proxy)
			var outs [2][]record.ClaimOutcome
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tc.short {
				// The claimers' time runs out 1.5 s after the first fault
				// hit (not after the start: under load the insert of 1,000
				// records alone can take longer), so the faults that keep
				// coming leave some outcomes unknown.
				go cancelAfterFirstFault(ctx, cancel, 1500*time.Millisecond, reps[0].proxy, reps[1].proxy)
			}
			var wg sync.WaitGroup
			for k, r := range reps {
				wg.Go(func() {
					outs[k] = r.ClaimBatch(ctx, record.BatchClaim{Fires: fires, Instance: r.inst, Incarnation: r.inc, Now: slot, TTL: time.Minute})
				})
			}
			wg.Wait()
			for _, r := range reps {
				r.proxy.ClearFailures()
			}
			// Disown what is unknown.
			var disown [2][]record.Lease
			counts := map[string]int{}
			for k := range reps {
				for _, o := range outs[k] {
					switch {
					case errors.Is(o.Err, record.ErrOutcomeUnknown):
						counts["unknown"]++
						if !errors.Is(o.Err, record.ErrUnreachable) || o.Lease.RunID == "" {
							t.Fatalf("unknown outcome without ErrUnreachable or lease: %+v", o)
						}
						disown[k] = append(disown[k], o.Lease)
					case o.Err != nil:
						counts["err"]++
					default:
						counts[o.Result.String()]++
					}
				}
				if len(disown[k]) > 0 {
					if err := reps[k].Disown(testCtx(t), disown[k], record.MissedUnreachable, slot.Add(time.Second)); err != nil {
						t.Fatal(err)
					}
				}
			}
			faults := 0
			for _, r := range reps {
				st := r.proxy.Stats()
				faults += st.Cuts
				for _, n := range st.Injected {
					faults += n
				}
				t.Logf("%s: commands %v, injected %v, cuts %d", r.inst, st.Commands, st.Injected, st.Cuts)
			}
			t.Logf("outcomes over both replicas: %v", counts)
			if faults == 0 {
				t.Fatal("no fault hit the batches")
			}
			records := map[string]record.RunDoc{}
			cur, err := e.runs.Find(testCtx(t), bson.D{{Key: "job_id", Value: bson.D{{Key: "$regex", Value: "^j"}}}})
			if err != nil {
				t.Fatal(err)
			}
			var docs []record.RunDoc
			if err := cur.All(testCtx(t), &docs); err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				if _, dup := records[d.JobID]; dup {
					t.Fatalf("%s: two records of one fire", d.JobID)
				}
				records[d.JobID] = d
			}
			locks := map[string]record.LockDoc{}
			lcur, err := e.locks.Find(testCtx(t), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			var ldocs []record.LockDoc
			if err := lcur.All(testCtx(t), &ldocs); err != nil {
				t.Fatal(err)
			}
			for _, l := range ldocs {
				locks[l.JobID] = l
			}
			for i, f := range fires {
				var winners []string
				reported := false
				for k := range reps {
					o := outs[k][i]
					if o.Err == nil && o.Result == record.Acquired {
						winners = append(winners, reps[k].inst)
					}
					if o.Err != nil {
						reported = true
					}
					if o.Err == nil && o.Result == record.Skipped {
						t.Errorf("%s: skipped by %s (%s) with free locks", f.JobID, reps[k].inst, o.Reason)
					}
				}
				r, hasRecord := records[f.JobID]
				switch {
				case len(winners) > 1:
					t.Fatalf("%s: won by %v", f.JobID, winners)
				case len(winners) == 1:
					if !hasRecord || r.Status != record.StatusRunning || r.Instance != winners[0] {
						t.Errorf("%s: won by %s, record %+v", f.JobID, winners[0], r)
					}
					if l := locks[f.JobID]; l.State != record.LockRunning || l.Holder != winners[0] || l.RunID != record.RunID(f.JobID, slot) {
						t.Errorf("%s: won by %s, lock %+v", f.JobID, winners[0], l)
					}
				case !reported:
					t.Errorf("%s: nobody won and nobody reported an error (record %+v)", f.JobID, r)
				default:
					// Not run: the record, if any, must not say running,
					// and the lock must not be held for it.
					if hasRecord && r.Status == record.StatusRunning {
						t.Errorf("%s: not run, but its record is running: %+v", f.JobID, r)
					}
					for k := range reps {
						if errors.Is(outs[k][i].Err, record.ErrOutcomeUnknown) && hasRecord && r.Instance == reps[k].inst &&
							(r.Status != record.StatusMissed || r.Reason != record.MissedUnreachable) {
							t.Errorf("%s: disowned by %s, record %+v: want missed", f.JobID, reps[k].inst, r)
						}
					}
					if l := locks[f.JobID]; l.State == record.LockRunning && l.RunID == record.RunID(f.JobID, slot) {
						t.Errorf("%s: not run, but its lock is held for it: %+v", f.JobID, l)
					}
				}
			}
		})
	}
}

// A batch of 1,000 owner fires of forbid jobs with free locks, counted on
// the wire at the proxy: at most 3 commands (insertMany and one bulkWrite;
// the driver may split neither at this size).
func TestClaimBatchCommandsOnTheWire(t *testing.T) {
	reps, _ := faultReplicas(t, 1)
	r := reps[0]
	const n = 1000
	fires := make([]record.FireClaim, n)
	for i := range fires {
		fires[i] = forbid(fmt.Sprintf("w%04d", i), base)
	}
	r.claim(t, base, time.Minute, forbid("warm", base))
	r.proxy.ResetStats()
	outs := r.claim(t, base, time.Minute, fires...)
	st := r.proxy.Stats()
	total := 0
	for name, c := range st.Commands {
		if name != "hello" && name != "isMaster" && name != "ismaster" { // the monitor's heartbeats
			total += c
		}
	}
	for _, o := range outs {
		if o.Result != record.Acquired {
			t.Fatalf("%+v", o)
		}
	}
	t.Logf("%d owner forbid fires: %d commands on the wire %v", n, total, st.Commands)
	if total > 3 {
		t.Errorf("%d commands for a batch of %d, want <= 3: %v", total, n, st.Commands)
	}
}

// cancelAfterFirstFault calls cancel after the first fault was injected or
// cut by one of proxies, plus after; it returns when ctx ends.
func cancelAfterFirstFault(ctx context.Context, cancel context.CancelFunc, after time.Duration, proxies ...*faultproxy.Proxy) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range proxies {
			st := p.Stats()
			hit := st.Cuts
			for _, n := range st.Injected {
				hit += n
			}
			if hit > 0 {
				t := time.AfterFunc(after, cancel)
				<-ctx.Done()
				t.Stop()
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
