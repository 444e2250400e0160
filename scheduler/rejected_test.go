package scheduler

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// togglePolicy refuses every enabled schedule while refuse is set.
type togglePolicy struct {
	mu     sync.Mutex
	refuse bool
}

func (p *togglePolicy) Check(schedule.Schedule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		return errors.New("refused by the policy")
	}
	return nil
}

func (p *togglePolicy) Jitter(schedule.Schedule) time.Duration { return 0 }

func (p *togglePolicy) set(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	p.mu.Unlock()
}

// Rejected counts the jobs whose latest document is refused, whatever
// refused it (Reload, Reject, Sync, Recheck) and whether or not they are
// armed on a last known good; Hooks.Rejected reports each job once as it
// enters that state, not again while it stays there (the same bad
// document read again, or another bad one), and again after a valid
// document cleared it.
func TestRejectedFollowsTheJobsAndReportsEachEntry(t *testing.T) {
	var mu sync.Mutex
	var entered []string
	policy := &togglePolicy{}
	e := newEngine(t, Options{Policy: policy, Hooks: Hooks{Rejected: func(id string) {
		mu.Lock()
		entered = append(entered, id)
		mu.Unlock()
	}}})
	step := func(what string, rejected int, reported ...string) {
		t.Helper()
		mu.Lock()
		got := entered
		entered = nil
		mu.Unlock()
		if e.Rejected() != rejected || !slices.Equal(got, reported) {
			t.Fatalf("%s: Rejected() = %d, reported %q; want %d, %q", what, e.Rejected(), got, rejected, reported)
		}
	}
	bad := errors.New("cron_expr: bad")
	step("empty engine", 0)

	expect(t, e.Reload(sch("a", "0 9 * * *")), Added)
	e.Reject("a", bad)
	step("a's bad document, a armed on its last known good", 1, "a")
	if st, _ := e.Get("a"); !st.Armed || st.LastError == "" {
		t.Fatalf("a = %+v, want armed with its error", st)
	}
	e.Reject("a", bad)
	expect(t, e.Reload(sch("a", "0 25 * * *")), Rejected)
	step("a refused again, by the same and by another bad document", 1)
	expect(t, e.Reload(sch("a", "0 10 * * *")), Replaced)
	step("a valid again", 0)
	expect(t, e.Reload(sch("a", "0 25 * * *")), Rejected)
	step("a broken again", 1, "a")

	e.Reject("b", bad)
	step("b, never valid", 2, "b")
	if !e.Remove("b") {
		t.Fatal("b not known")
	}
	step("b removed", 1)

	// Full reads: the start's, then the same snapshot again (a poll), then
	// one with a fixed, then broken again.
	badC := Item{Schedule: sch("c", "0 25 * * *")}
	undecodable := Item{Schedule: schedule.Schedule{ID: schedule.RefusedKey(`{"$oid":"1"}`)}, Err: bad}
	snap := []Item{{Schedule: sch("a", "0 25 * * *")}, badC, undecodable}
	syncItems(e, snap)
	step("a snapshot of a (already refused), c and a non-string _id", 3, "c", schedule.RefusedKey(`{"$oid":"1"}`))
	syncItems(e, snap)
	step("the same snapshot read again", 3)
	syncItems(e, []Item{{Schedule: sch("a", "0 25 * * *")}, {Schedule: sch("c", "0 9 * * *")}, undecodable})
	step("c fixed", 2)
	syncItems(e, snap)
	step("c broken again", 3, "c")
	syncItems(e, []Item{{Schedule: sch("a", "0 10 * * *")}})
	step("a fixed, the others gone", 0)

	// The policy refuses what it accepted: Recheck keeps a's timer with
	// the policy's error.
	policy.set(true)
	if n := e.Recheck(func(schedule.Schedule) bool { return true }); n != 1 {
		t.Fatalf("Recheck applied %d jobs, want 1", n)
	}
	step("a refused by the policy", 1, "a")
	policy.set(false)
	e.Recheck(func(schedule.Schedule) bool { return true })
	step("a accepted again", 0)
	if st, _ := e.Get("a"); !st.Armed || st.LastError != "" {
		t.Fatalf("a = %+v, want armed without an error", st)
	}
}
