package members

import "hash/fnv"

// Owner returns the member of live that owns jobID, by rendezvous
// (highest-random-weight) hashing: every member gets a weight from a hash
// of the job id and its instance id, and the highest weight wins (ties,
// which need equal hashes, go to the smaller instance id). It is
// deterministic — every replica with the same live set picks the same
// owner — and stable: when a member joins, it takes over only the jobs it
// now wins, and when one leaves, only its own jobs move, each to the
// member that was second for it. The incarnation is not hashed, so a
// restarted instance owns the same jobs as before. The zero Member is
// returned when live is empty.
//
// Only a member whose engine fires (FiringSince set) owns jobs, unless no
// member of live fires yet (a deployment starting): a replica still
// reading its schedules claims nothing at the slot, so while it starts the
// jobs it is to own stay with the firing member that owns them without it,
// which claims their fires at once instead of after the claim grace.
func Owner(jobID string, live []Member) Member {
	var o ownerChoice
	for _, m := range live {
		o.consider(jobID, m)
	}
	return o.best()
}

// ownerChoice is Owner's running pick: the best of the members that fire,
// and the best of all, for when none fires.
type ownerChoice struct{ firing, all choice }

func (o *ownerChoice) consider(jobID string, m Member) {
	w := weight(jobID, m.ID)
	o.all.take(m, w)
	if !m.FiringSince.IsZero() {
		o.firing.take(m, w)
	}
}

// best is the owner among the members considered (the zero Member when
// there were none).
func (o *ownerChoice) best() Member {
	if o.firing.any {
		return o.firing.best
	}
	return o.all.best
}

// choice is a running pick: the member with the highest weight seen so
// far (ties to the smaller instance id).
type choice struct {
	best Member
	w    uint64
	any  bool
}

// beaten reports whether m, of weight w, comes before the pick: the one
// order of members for a job (Owner, Owns and Armers all use it).
func (c *choice) beaten(m Member, w uint64) bool {
	return !c.any || w > c.w || (w == c.w && m.ID < c.best.ID)
}

func (c *choice) take(m Member, w uint64) {
	if c.beaten(m, w) {
		c.best, c.w, c.any = m, w, true
	}
}

// weight is the rendezvous weight of (jobID, memberID): FNV-1a over both,
// separated by a byte neither contains in practice, then mixed so that
// the weights of near-identical ids are independent.
func weight(jobID, memberID string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(jobID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(memberID))
	return mix64(h.Sum64())
}

// mix64 is the splitmix64 finaliser: it spreads every input bit over the
// whole output, which FNV alone does poorly in its high bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// OwnedCounts returns, for each member of live, how many of jobIDs it
// owns (by instance id). It is the one count of owned jobs: the daemon's
// overview and `cronswap members list` both call it, over the same set of
// jobs — every schedules document whose _id is a job id, enabled or not
// (a paused job's run-now is claimed first by its owner too) and valid or
// not — so that they agree.
func OwnedCounts(jobIDs []string, live []Member) map[string]int {
	out := make(map[string]int, len(live))
	for _, m := range live {
		out[m.ID] = 0
	}
	if len(live) == 0 {
		return out
	}
	for _, id := range jobIDs {
		out[Owner(id, live).ID]++
	}
	return out
}

// Armers returns the two members of live that arm jobID's timer when the
// replicas divide the schedules: the two with the highest rendezvous
// weights, firing or not — its owner (Owner) once every member fires, and
// the member that owns the job once the owner is gone, so that it is
// armed already when that happens. While one member joins, the job's
// owner (the best of the members that fire) is one of the two. second is
// the zero Member when live has fewer than two members. With R live
// members each arms about 2/R of the jobs; a member that joins or leaves
// moves only the jobs whose first two it changes.
func Armers(jobID string, live []Member) (first, second Member) {
	var t top2
	for _, m := range live {
		t.consider(jobID, m)
	}
	return t.first.best, t.second.best
}

// top2 is Armers' running pick: the two highest weights seen so far.
type top2 struct{ first, second choice }

func (t *top2) consider(jobID string, m Member) {
	w := weight(jobID, m.ID)
	switch {
	case t.first.beaten(m, w):
		t.second = t.first
		t.first = choice{best: m, w: w, any: true}
	case t.second.beaten(m, w):
		t.second = choice{best: m, w: w, any: true}
	}
}

// ArmedCounts returns, for each member of live, how many of jobIDs it arms
// (by instance id): a member that divides the schedules (Member.Divides)
// arms the jobs Armers names it for, any other member every job. It is the
// one count of armed jobs: the daemon's overview and `cronswap members
// list` show it beside the owned jobs.
func ArmedCounts(jobIDs []string, live []Member) map[string]int {
	out := make(map[string]int, len(live))
	dividing := false
	for _, m := range live {
		out[m.ID] = len(jobIDs)
		if m.Divides {
			out[m.ID], dividing = 0, true
		}
	}
	if !dividing {
		return out
	}
	divides := make(map[string]bool, len(live))
	for _, m := range live {
		divides[m.ID] = m.Divides
	}
	for _, id := range jobIDs {
		first, second := Armers(id, live)
		if divides[first.ID] {
			out[first.ID]++
		}
		if second.ID != "" && divides[second.ID] {
			out[second.ID]++
		}
	}
	return out
}
