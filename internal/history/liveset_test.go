package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// The live set answers as a map of ids to passes does, through growth,
// removals and renewals: random operations on both, compared after each
// round.
func TestLiveSetAgreesWithAMap(t *testing.T) {
	live, want := newLiveSet(), map[string]uint32{}
	rng := rand.New(rand.NewPCG(1, 2))
	id := func() string { return fmt.Sprintf("job-%d", rng.IntN(20_000)) }
	for round := range 20 {
		pass := uint32(round + 1)
		for range 5_000 {
			k := id()
			switch rng.IntN(4) {
			case 0, 1:
				live.set(strings.Clone(k), pass)
				want[k] = pass
			case 2:
				_, ok := want[k]
				if got := live.renew(strings.Clone(k), pass); got != ok {
					t.Fatalf("round %d: renew(%s) = %v, want %v", round, k, got, ok)
				}
				if ok {
					want[k] = pass
				}
			case 3:
				live.Remove(k)
				delete(want, k)
			}
		}
		if live.Len() != len(want) {
			t.Fatalf("round %d: %d jobs, want %d", round, live.Len(), len(want))
		}
		for k := range want {
			if _, ok := live.Get(k); !ok {
				t.Fatalf("round %d: %s missing", round, k)
			}
		}
		var stale []string
		for k, p := range want {
			if p != pass {
				stale = append(stale, k)
			}
		}
		got := live.notIn(pass)
		slices.Sort(got)
		slices.Sort(stale)
		if !slices.Equal(got, stale) {
			t.Fatalf("round %d: notIn(%d) gave %d ids, want %d", round, pass, len(got), len(stale))
		}
	}
	if _, ok := live.Get("job-20000"); ok {
		t.Error("an id never stored is in the set")
	}
}

// renew keeps the bytes of the id it is given, so that the copy read from
// the server is let go once a full read listed the job; it adds nothing.
func TestLiveSetRenewKeepsTheNewBytes(t *testing.T) {
	live := newLiveSet()
	live.set(strings.Clone("job-1"), 0)
	fromRead := strings.Clone("job-1")
	if !live.renew(fromRead, 3) {
		t.Fatal("renew of a stored job said it is not stored")
	}
	if live.renew("job-2", 3) {
		t.Fatal("renew of a job not stored said it is stored")
	}
	if _, ok := live.Get("job-2"); ok {
		t.Fatal("renew of a job not stored stored it")
	}
	e, ok := live.Get("job-1")
	if !ok || e.pass != 3 || e.p != unsafe.StringData(fromRead) {
		t.Fatalf("entry after renew: %+v (found %v), want pass 3 on the read's bytes", e, ok)
	}
	live.set("", 3) // a sighting whose job_id is empty: kept and found like any
	if _, ok := live.Get(""); !ok || !live.renew("", 3) {
		t.Fatal("an empty id stored is not found")
	}
	if got := live.notIn(3); len(got) != 0 {
		t.Fatalf("notIn(3) = %v, want none", got)
	}
}
