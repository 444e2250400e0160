package httpapi

import (
	"context"
	"slices"

	"github.com/cronswap/cronswap/internal/members"
)

// liveMembers reads the live members (Options.Members); none without a
// source.
func (a *api) liveMembers(ctx context.Context) ([]members.Member, error) {
	if a.o.Members == nil {
		return nil, nil
	}
	return a.o.Members(ctx)
}

// withOwners sets the Owner and ArmedBy of every schedule of out (ownerOf,
// armedBy).
func withOwners(out []Schedule, live []members.Member) {
	for i := range out {
		out[i].Owner = ownerOf(out[i], live)
		out[i].ArmedBy = armedBy(out[i], live)
	}
}

// armedBy returns the instance ids of the members of live that arm s's
// timer when they divide the schedules (members.Armers, those of them with
// Divides); nil when none of live divides, and for a refused document
// whose _id is not a job id.
func armedBy(s Schedule, live []members.Member) []string {
	if s.InvalidID || !slices.ContainsFunc(live, func(m members.Member) bool { return m.Divides }) {
		return nil
	}
	var out []string
	first, second := members.Armers(s.ID, live)
	for _, m := range []members.Member{first, second} {
		if m.Divides {
			out = append(out, m.ID)
		}
	}
	return out
}

// ownerOf returns the instance id of the owner of s among live
// (members.Owner, the function members.OwnedCounts counts with). A refused
// document whose _id is not a job id (InvalidID) is no job and has none;
// with no live member, no job has one.
func ownerOf(s Schedule, live []members.Member) string {
	if s.InvalidID || len(live) == 0 {
		return ""
	}
	return members.Owner(s.ID, live).ID
}

// jobIDs returns the ids of the jobs of list, the set whose owners the
// overview counts (members.OwnedCounts): every entry but the refused
// documents whose _id is not a job id, enabled or not, valid or not.
func jobIDs(list []Schedule) []string {
	ids := make([]string, 0, len(list))
	for _, s := range list {
		if !s.InvalidID {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
