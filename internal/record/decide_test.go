package record

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

// What a claim does for every overlap policy against every state of the
// job's lock, for a cron slot, a run-now request (an off-schedule run that
// may wait on the lock) and a backfilled slot (one that may not). The
// expected steps are spelled out, one column per policy:
//
//	again: take the lock while it is free (again+fence: with the lock's
//	fence plus one); takeover: take it over from a run no longer live
//	acquired: the fire holds it; waiting: it waits on the lock's buffer
//	push: put it on the buffer (+holder: naming the live holder)
//	skip: not run (+holder: naming the live holder); repair: damaged
func TestDecideClaimEveryPolicyAndLockState(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	slot := now.Truncate(time.Minute)
	const me, myLife = "a", "a1"
	policies := []jobs.Overlap{jobs.OverlapAllow, jobs.OverlapSkip, jobs.OverlapBufferOne, jobs.OverlapBufferAll, jobs.OverlapCancelOther}

	type kind struct {
		name    string
		off     bool
		mayWait bool
	}
	kinds := map[string]kind{
		"slot":     {name: "slot", mayWait: true},
		"run-now":  {name: "run-now", off: true, mayWait: true},
		"backfill": {name: "backfill", off: true},
	}
	fireOf := func(k kind, o jobs.Overlap) ClaimFire {
		l := Lease{JobID: "j", Slot: slot, Instance: me, Incarnation: myLife, RunID: RunID("j", slot),
			Fence: FenceOf(slot), Overlap: o, Token: "t1"}
		if k.off {
			l.RunID, l.Fence, l.OffSchedule = "trigger/r1", now.UnixMilli(), true
		}
		return ClaimFire{Lease: l, MayWait: k.mayWait, Now: now}
	}
	free := func(f ClaimFire) LockState {
		return LockState{State: LockFree, LastSlot: slot.Add(-time.Minute), LastSlotOK: true, Fence: FenceOf(slot.Add(-time.Minute)), BufferOK: true}
	}
	heldBy := func(holder, life string, leaseUntil time.Time) func(ClaimFire) LockState {
		return func(f ClaimFire) LockState {
			l := free(f)
			l.State, l.Holder, l.Incarnation, l.RunID, l.Claim, l.LeaseUntil = LockRunning, holder, life, "j@before", "t0", leaseUntil
			return l
		}
	}
	waiting := func(state func(ClaimFire) LockState, n int) func(ClaimFire) LockState {
		return func(f ClaimFire) LockState {
			l := state(f)
			for i := range n {
				l.Waiting = append(l.Waiting, fmt.Sprintf("j@waiting-%d", i))
			}
			return l
		}
	}
	live := heldBy("b", "b1", now.Add(time.Minute))
	states := map[string]func(ClaimFire) LockState{
		"free":               free,
		"free, 1 waiting":    waiting(free, 1),
		"held":               live,
		"held, 1 waiting":    waiting(live, 1),
		"held, 100 waiting":  waiting(live, jobs.BufferAllLimit),
		"past its lease":     heldBy("b", "b1", now.Add(-time.Second)),
		"a previous life's":  heldBy(me, "a0", now.Add(time.Minute)),
		"damaged":            func(f ClaimFire) LockState { return LockState{Damage: []string{"state missing"}} },
		"later slot claimed": func(f ClaimFire) LockState { l := free(f); l.LastSlot = slot.Add(time.Minute); return l },
		"fence ahead of the fire's": func(f ClaimFire) LockState {
			l := free(f)
			l.Fence = f.Lease.Fence + 5
			return l
		},
		"held by this claim": func(f ClaimFire) LockState {
			l := heldBy(me, myLife, now.Add(time.Minute))(f)
			l.RunID, l.Claim = f.Lease.RunID, f.Lease.Token
			if !f.Lease.OffSchedule {
				l.LastSlot = slot // the write moved it
			}
			return l
		},
		"held, this fire waiting": func(f ClaimFire) LockState {
			l := live(f)
			l.Waiting = []string{f.Lease.RunID}
			return l
		},
	}
	// state, kind: allow, skip, buffer_one, buffer_all, cancel_other
	table := []struct {
		state, kind string
		want        [5]string
	}{
		{"free", "slot", [5]string{"again", "again", "again", "again", "again"}},
		{"free", "run-now", [5]string{"acquired", "again", "again", "again", "again"}},
		{"free", "backfill", [5]string{"acquired", "again", "again", "again", "again"}},
		{"free, 1 waiting", "slot", [5]string{"again", "again", "skip", "push", "skip"}},
		{"free, 1 waiting", "run-now", [5]string{"acquired", "again", "skip", "push", "skip"}},
		{"free, 1 waiting", "backfill", [5]string{"acquired", "again", "skip", "skip", "skip"}},
		{"held", "slot", [5]string{"again", "skip+holder", "push+holder", "push+holder", "push+holder"}},
		{"held", "run-now", [5]string{"acquired", "skip+holder", "push+holder", "push+holder", "push+holder"}},
		{"held", "backfill", [5]string{"acquired", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
		{"held, 1 waiting", "slot", [5]string{"again", "skip+holder", "skip+holder", "push+holder", "skip+holder"}},
		{"held, 1 waiting", "run-now", [5]string{"acquired", "skip+holder", "skip+holder", "push+holder", "skip+holder"}},
		{"held, 1 waiting", "backfill", [5]string{"acquired", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
		{"held, 100 waiting", "slot", [5]string{"again", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
		{"held, 100 waiting", "run-now", [5]string{"acquired", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
		{"held, 100 waiting", "backfill", [5]string{"acquired", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
		{"past its lease", "slot", [5]string{"again", "takeover", "takeover", "takeover", "takeover"}},
		{"past its lease", "run-now", [5]string{"acquired", "takeover", "takeover", "takeover", "takeover"}},
		{"past its lease", "backfill", [5]string{"acquired", "takeover", "takeover", "takeover", "takeover"}},
		{"a previous life's", "slot", [5]string{"again", "takeover", "takeover", "takeover", "takeover"}},
		{"a previous life's", "run-now", [5]string{"acquired", "takeover", "takeover", "takeover", "takeover"}},
		{"a previous life's", "backfill", [5]string{"acquired", "takeover", "takeover", "takeover", "takeover"}},
		{"damaged", "slot", [5]string{"repair", "repair", "repair", "repair", "repair"}},
		{"damaged", "run-now", [5]string{"repair", "repair", "repair", "repair", "repair"}},
		{"damaged", "backfill", [5]string{"repair", "repair", "repair", "repair", "repair"}},
		{"later slot claimed", "slot", [5]string{"skip", "skip", "skip", "skip", "skip"}},
		{"later slot claimed", "run-now", [5]string{"acquired", "again", "again", "again", "again"}},
		{"later slot claimed", "backfill", [5]string{"acquired", "again", "again", "again", "again"}},
		{"fence ahead of the fire's", "slot", [5]string{"again", "again", "again", "again", "again"}},
		{"fence ahead of the fire's", "run-now", [5]string{"acquired", "again+fence", "again+fence", "again+fence", "again+fence"}},
		{"fence ahead of the fire's", "backfill", [5]string{"acquired", "again+fence", "again+fence", "again+fence", "again+fence"}},
		{"held by this claim", "slot", [5]string{"acquired", "acquired", "acquired", "acquired", "acquired"}},
		{"held by this claim", "run-now", [5]string{"acquired", "acquired", "acquired", "acquired", "acquired"}},
		{"held by this claim", "backfill", [5]string{"acquired", "acquired", "acquired", "acquired", "acquired"}},
		{"held, this fire waiting", "slot", [5]string{"again", "skip+holder", "waiting", "waiting", "waiting"}},
		{"held, this fire waiting", "run-now", [5]string{"acquired", "skip+holder", "waiting", "waiting", "waiting"}},
		{"held, this fire waiting", "backfill", [5]string{"acquired", "skip+holder", "skip+holder", "skip+holder", "skip+holder"}},
	}
	covered := map[string]bool{}
	for _, tc := range table {
		for p, o := range policies {
			k := kinds[tc.kind]
			f := fireOf(k, o)
			l := states[tc.state](f)
			got := stepName(DecideClaim(l, f), f)
			if got != tc.want[p] {
				t.Errorf("%s, %s, overlap %s: %s, want %s (%+v)", tc.state, tc.kind, o, got, tc.want[p], DecideClaim(l, f))
			}
			covered[tc.state+"/"+tc.kind] = true
		}
	}
	for s := range states {
		for k := range kinds {
			if !covered[s+"/"+k] {
				t.Errorf("lock state %q for a %s is not in the table", s, k)
			}
		}
	}
}

// stepName is d as the table spells it.
func stepName(d ClaimDecision, f ClaimFire) string {
	holder := ""
	if d.Holder != "" {
		holder = "+holder"
	}
	switch d.Step {
	case ClaimAgain:
		again := "again"
		if d.TakeOver {
			if d.Holder == "" || d.HolderRunID == "" {
				return "takeover naming no holder"
			}
			again = "takeover"
		}
		if d.Fence != 0 {
			if d.Fence <= f.Lease.Fence {
				return fmt.Sprintf("%s with fence %d, not above the fire's", again, d.Fence)
			}
			return again + "+fence"
		}
		return again
	case ClaimRepair:
		return "repair"
	case ClaimAcquired:
		return "acquired"
	case ClaimWaiting:
		return "waiting"
	case ClaimPush:
		return "push" + holder
	case ClaimSkip:
		return "skip" + holder
	case ClaimLookTaken:
		return "look-taken"
	}
	return fmt.Sprintf("step %d", d.Step)
}

// A fire this claim put on the lock's buffer, and that is no longer there:
// whether a taker already started it decides (asked only when the push
// may have landed: a cron push also moves the last slot).
func TestDecideClaimPushedFireGoneFromTheBuffer(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	slot := now.Truncate(time.Minute)
	for _, tc := range []struct {
		name     string
		off      bool
		lastSlot time.Time
		taken    Known
		want     string
	}{
		{"slot, push landed, not asked", false, slot, Unasked, "look-taken"},
		{"slot, push landed, taken", false, slot, Yes, "waiting"},
		{"slot, push landed, not taken", false, slot, No, "skip"},
		{"slot, push did not land", false, slot.Add(-time.Minute), Unasked, "again"},
		{"run-now, not asked", true, slot.Add(-time.Minute), Unasked, "look-taken"},
		{"run-now, taken", true, slot.Add(-time.Minute), Yes, "waiting"},
		{"run-now, not taken", true, slot.Add(-time.Minute), No, "again"},
	} {
		l := Lease{JobID: "j", Slot: slot, Instance: "a", Incarnation: "a1", RunID: RunID("j", slot),
			Fence: FenceOf(slot), Overlap: jobs.OverlapBufferOne, Token: "t1", OffSchedule: tc.off}
		if tc.off {
			l.RunID, l.Fence = "trigger/r1", now.UnixMilli()
		}
		f := ClaimFire{Lease: l, MayWait: true, Pushed: true, Taken: tc.taken, Now: now}
		lock := LockState{State: LockFree, LastSlot: tc.lastSlot, LastSlotOK: true, BufferOK: true}
		if got := stepName(DecideClaim(lock, f), f); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A cron slot whose job's run count has reached its max_runs is skipped
// as max_runs reached, under every policy, neither run nor put on the
// buffer; unless its own write landed (that write counted it) or a later
// slot was claimed. Off-schedule runs do not count and are not capped.
func TestDecideClaimMaxRuns(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	slot := now.Truncate(time.Minute)
	const max = 3
	policies := []jobs.Overlap{jobs.OverlapAllow, jobs.OverlapSkip, jobs.OverlapBufferOne, jobs.OverlapBufferAll, jobs.OverlapCancelOther}
	fireOf := func(off bool, o jobs.Overlap) ClaimFire {
		l := Lease{JobID: "j", Slot: slot, Instance: "a", Incarnation: "a1", RunID: RunID("j", slot),
			Fence: FenceOf(slot), Overlap: o, Token: "t1"}
		if off {
			l.RunID, l.Fence, l.OffSchedule = "trigger/r1", now.UnixMilli(), true
		}
		return ClaimFire{Lease: l, MayWait: true, Now: now, MaxRuns: max}
	}
	lock := func(runs int64, held bool) LockState {
		l := LockState{State: LockFree, LastSlot: slot.Add(-time.Minute), LastSlotOK: true, Fence: FenceOf(slot.Add(-time.Minute)),
			BufferOK: true, Runs: runs}
		if held {
			l.State, l.Holder, l.Incarnation, l.RunID, l.Claim, l.LeaseUntil = LockRunning, "b", "b1", "j@before", "t0", now.Add(time.Minute)
		}
		return l
	}
	name := func(d ClaimDecision, f ClaimFire) string {
		s := stepName(d, f)
		if d.MaxRunsReached {
			s += "+max"
		}
		return s
	}
	for _, tc := range []struct {
		name string
		off  bool
		lock func(ClaimFire) LockState
		want [5]string
	}{
		{"slot, count below", false, func(ClaimFire) LockState { return lock(max-1, false) },
			[5]string{"again", "again", "again", "again", "again"}},
		{"slot, count at max", false, func(ClaimFire) LockState { return lock(max, false) },
			[5]string{"skip+max", "skip+max", "skip+max", "skip+max", "skip+max"}},
		{"slot, count past max (lowered)", false, func(ClaimFire) LockState { return lock(max+7, false) },
			[5]string{"skip+max", "skip+max", "skip+max", "skip+max", "skip+max"}},
		{"slot, held, count at max", false, func(ClaimFire) LockState { return lock(max, true) },
			[5]string{"skip+max", "skip+max", "skip+max", "skip+max", "skip+max"}},
		{"slot, held, count below", false, func(ClaimFire) LockState { return lock(max-1, true) },
			[5]string{"again", "skip+holder", "push+holder", "push+holder", "push+holder"}},
		{"slot, its own write landed", false, func(f ClaimFire) LockState {
			l := lock(max, true)
			l.Holder, l.Incarnation, l.RunID, l.Claim, l.LastSlot = "a", "a1", f.Lease.RunID, f.Lease.Token, slot
			return l
		}, [5]string{"acquired", "acquired", "acquired", "acquired", "acquired"}},
		{"slot, a later slot claimed", false, func(ClaimFire) LockState {
			l := lock(max, false)
			l.LastSlot = slot.Add(time.Minute)
			return l
		}, [5]string{"skip", "skip", "skip", "skip", "skip"}},
		{"run-now, count at max", true, func(ClaimFire) LockState { return lock(max, false) },
			[5]string{"acquired", "again", "again", "again", "again"}},
	} {
		for p, o := range policies {
			f := fireOf(tc.off, o)
			if got := name(DecideClaim(tc.lock(f), f), f); got != tc.want[p] {
				t.Errorf("%s, overlap %s: %s, want %s", tc.name, o, got, tc.want[p])
			}
		}
	}
}

// A cron slot overtaken by a later slot claimed first is recorded missed
// with the reason its fire names (a slot a hand-over offers), under every
// policy; without one it is skipped. The reason changes nothing else: a
// slot not overtaken is decided as without it, and an off-schedule run is
// never overtaken.
func TestDecideClaimOvertakenReason(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	slot := now.Truncate(time.Minute)
	for _, o := range []jobs.Overlap{jobs.OverlapAllow, jobs.OverlapSkip, jobs.OverlapBufferOne, jobs.OverlapBufferAll, jobs.OverlapCancelOther} {
		for _, tc := range []struct {
			name     string
			off      bool
			lastSlot time.Time
			reason   string
			want     string // the step, and the missed reason
		}{
			{"overtaken, a reason", false, slot.Add(time.Minute), MissedHandOver, "skip missed=hand_over"},
			{"overtaken, no reason", false, slot.Add(time.Minute), "", "skip missed="},
			{"not overtaken, a reason", false, slot.Add(-time.Minute), MissedHandOver, "again missed="},
			{"run-now behind a later slot, a reason", true, slot.Add(time.Minute), MissedHandOver, "again missed="},
		} {
			l := Lease{JobID: "j", Slot: slot, Instance: "a", Incarnation: "a1", RunID: RunID("j", slot),
				Fence: FenceOf(slot), Overlap: o, Token: "t1", OffSchedule: tc.off}
			if tc.off {
				l.RunID, l.Fence = "trigger/r1", now.UnixMilli()
			}
			f := ClaimFire{Lease: l, MayWait: true, Now: now, OvertakenReason: tc.reason}
			lock := LockState{State: LockFree, LastSlot: tc.lastSlot, LastSlotOK: true, Fence: FenceOf(slot.Add(-time.Minute)), BufferOK: true}
			d := DecideClaim(lock, f)
			want := tc.want
			if tc.off && !o.TakesLock() {
				want = "acquired missed=" // an off-schedule run under allow takes no lock
			}
			if got := stepName(d, f) + " missed=" + d.MissedReason; got != want {
				t.Errorf("%s, overlap %s: %s, want %s", tc.name, o, got, want)
			}
			if d.MissedReason != "" && !strings.Contains(d.Reason, "later slot") {
				t.Errorf("%s, overlap %s: reason %q, want the later slot named", tc.name, o, d.Reason)
			}
		}
	}
}
