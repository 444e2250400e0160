package members

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("job-%06d", i)
	}
	return out
}

func named(names ...string) []Member {
	out := make([]Member, len(names))
	for i, n := range names {
		out[i] = Member{ID: n, Incarnation: "inc-" + n}
	}
	return out
}

func TestOwnerEmpty(t *testing.T) {
	if got := Owner("a", nil); got.ID != "" {
		t.Fatalf("Owner with no members = %+v, want the zero Member", got)
	}
}

func TestOwnerDeterministicWhateverTheOrder(t *testing.T) {
	live := named("r1", "r2", "r3", "r4")
	rev := slices.Clone(live)
	slices.Reverse(rev)
	for _, id := range ids(2000) {
		a, b := Owner(id, live), Owner(id, rev)
		if a.ID != b.ID {
			t.Fatalf("%s: owner %s in one order, %s in the other", id, a.ID, b.ID)
		}
	}
}

func TestOwnerIgnoresIncarnation(t *testing.T) {
	before := named("r1", "r2", "r3")
	after := slices.Clone(before)
	after[1].Incarnation = "restarted"
	for _, id := range ids(2000) {
		if a, b := Owner(id, before), Owner(id, after); a.ID != b.ID {
			t.Fatalf("%s: owner %s, %s after r2 restarted", id, a.ID, b.ID)
		}
	}
}

// Each of k members owns about 1/k of the jobs: within 5 % of the mean
// (more than 6 standard deviations at these sizes).
func TestOwnerDistribution(t *testing.T) {
	jobs := ids(30000)
	for _, live := range [][]Member{named("r1", "r2", "r3"), named("a", "b", "c", "d", "e"), named("replica-1", "replica-2")} {
		counts := OwnedCounts(jobs, live)
		mean := float64(len(jobs)) / float64(len(live))
		for _, m := range live {
			if d := math.Abs(float64(counts[m.ID])-mean) / mean; d > 0.05 {
				t.Errorf("%d members: %s owns %d jobs, %.1f%% off the mean %.0f (counts %v)",
					len(live), m.ID, counts[m.ID], 100*d, mean, counts)
			}
		}
	}
}

// A member that joins takes jobs only for itself (about 1/(k+1) of them);
// one that leaves gives away only its own jobs, and the others keep theirs.
func TestOwnerStableOnJoinAndLeave(t *testing.T) {
	jobs := ids(20000)
	three := named("r1", "r2", "r3")
	four := named("r1", "r2", "r3", "r4")
	moved := 0
	for _, id := range jobs {
		was, is := Owner(id, three), Owner(id, four)
		if was.ID != is.ID {
			if is.ID != "r4" {
				t.Fatalf("%s moved from %s to %s when r4 joined", id, was.ID, is.ID)
			}
			moved++
		}
	}
	if frac := float64(moved) / float64(len(jobs)); math.Abs(frac-0.25) > 0.02 {
		t.Errorf("r4 joining moved %.1f%% of the jobs, want about 25%%", 100*frac)
	}
	two := named("r1", "r3")
	for _, id := range jobs {
		was, is := Owner(id, three), Owner(id, two)
		if was.ID != "r2" && was.ID != is.ID {
			t.Fatalf("%s moved from %s to %s when r2 left", id, was.ID, is.ID)
		}
		if was.ID == "r2" && is.ID == "r2" {
			t.Fatalf("%s still owned by r2 after it left", id)
		}
	}
}

func TestOwnedCountsSumAndZero(t *testing.T) {
	live := named("r1", "r2", "r3")
	counts := OwnedCounts(ids(999), live)
	sum := 0
	for _, m := range live {
		c, ok := counts[m.ID]
		if !ok {
			t.Fatalf("no count for %s", m.ID)
		}
		sum += c
	}
	if sum != 999 {
		t.Fatalf("counts %v sum to %d, want 999", counts, sum)
	}
	if got := OwnedCounts(ids(5), nil); len(got) != 0 {
		t.Fatalf("no live members: counts %v", got)
	}
}

// The first of Armers is the Owner; the second is the owner once the first
// is gone — so a member's death leaves every job armed by one that was
// armed already. Each of R members arms about 2/R of the jobs.
func TestArmersAreOwnerAndSuccessor(t *testing.T) {
	live := named("r1", "r2", "r3", "r4")
	jobs := ids(20000)
	for _, id := range jobs {
		first, second := Armers(id, live)
		if first.ID != Owner(id, live).ID {
			t.Fatalf("%s: first armer %s, owner %s", id, first.ID, Owner(id, live).ID)
		}
		if second.ID == "" || second.ID == first.ID {
			t.Fatalf("%s: second armer %q (first %s)", id, second.ID, first.ID)
		}
		var rest []Member
		for _, m := range live {
			if m.ID != first.ID {
				rest = append(rest, m)
			}
		}
		if next := Owner(id, rest); next.ID != second.ID {
			t.Fatalf("%s: without %s the owner is %s, not the second armer %s", id, first.ID, next.ID, second.ID)
		}
	}
	for i := range live {
		live[i].Divides = true
	}
	counts := ArmedCounts(jobs, live)
	for id, n := range counts {
		if want := len(jobs) / 2; math.Abs(float64(n-want)) > 0.05*float64(want) {
			t.Errorf("%s arms %d of %d jobs, want about %d", id, n, len(jobs), want)
		}
	}
	if first, second := Armers("x", named("only")); first.ID != "only" || second.ID != "" {
		t.Fatalf("one member: %q, %q", first.ID, second.ID)
	}
	// A member that does not divide arms every job.
	if counts := ArmedCounts(jobs, named("r1", "r2")); counts["r1"] != len(jobs) || counts["r2"] != len(jobs) {
		t.Fatalf("members arming every job: %v", counts)
	}
}

// While some members fire, only they own jobs: a member still starting
// (no FiringSince) owns none, and the jobs it is to own stay with the best
// of the members that fire — one of the job's two armers — while every
// other job keeps its owner. Once it fires it takes them; with none
// firing, the owner is the best of all.
func TestOwnerIsAMemberThatFires(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	live := named("r1", "r2", "r3")
	live[0].FiringSince, live[1].FiringSince = at, at
	starting := 0
	for _, id := range ids(3000) {
		best := Owner(id, named("r1", "r2", "r3")).ID // none fires: the best of all
		got := Owner(id, live).ID
		want := best
		if best == "r3" {
			starting++
			want = Owner(id, live[:2]).ID
		}
		if got != want {
			t.Fatalf("%s: owner %s, want %s (the best of all is %s)", id, got, want, best)
		}
		if first, second := Armers(id, live); got != first.ID && got != second.ID {
			t.Fatalf("%s: owner %s is not one of its armers %s, %s", id, got, first.ID, second.ID)
		}
	}
	if starting < 3000/5 {
		t.Fatalf("only %d of 3000 jobs are the starting member's best", starting)
	}
	live[2].FiringSince = at
	for _, id := range ids(3000) {
		if got, want := Owner(id, live).ID, Owner(id, named("r1", "r2", "r3")).ID; got != want {
			t.Fatalf("%s: owner %s once all fire, want %s", id, got, want)
		}
	}
}
