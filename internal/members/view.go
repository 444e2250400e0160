package members

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// view is one read of the members collection: the documents whose lease
// had not passed when it was read, with this process's own document as
// last written in place of what the read returned (see refreshView). It is
// never modified once stored.
type view struct {
	// readAt is when the read was sent; a read sent earlier never
	// replaces one sent later.
	readAt time.Time
	// members is ordered by instance id.
	members []Member
}

// refreshView reads the live members (one find) and stores them as the
// cached view that Owns and LiveView answer from. This process's own
// document always counts as live, as last written by this process: a read
// that raced its own write (or a heartbeat that failed, or a document
// that another process overwrote) must not make a member disown its jobs
// while it runs. On a failed read the previous view stays.
func (m *Membership) refreshView(ctx context.Context) error {
	readAt := m.opts.Now()
	cur, err := m.coll.Find(ctx, bson.D{{Key: "lease_until", Value: bson.D{{Key: "$gt", Value: readAt}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return fmt.Errorf("read the live members in %s: %w", CollectionName, err)
	}
	var read []Member
	if err := cur.All(ctx, &read); err != nil {
		return fmt.Errorf("read the live members in %s: %w", CollectionName, err)
	}
	self := m.Self() // as last written: live whatever the read says
	v := &view{readAt: readAt, members: make([]Member, 0, len(read)+1)}
	for _, d := range read {
		if d.ID != self.ID {
			v.members = append(v.members, d)
		}
	}
	v.members = append(v.members, self)
	slices.SortFunc(v.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	for {
		old := m.view.Load()
		if old != nil && old.readAt.After(readAt) {
			return nil // a later read landed first
		}
		if m.view.CompareAndSwap(old, v) {
			return nil
		}
	}
}

// refreshAfter refreshes the view and logs (at debug: the next heartbeat
// tries again, and the previous view stays) when it cannot.
func (m *Membership) refreshAfter(ctx context.Context, what string) {
	rctx, cancel := context.WithTimeout(ctx, m.opts.Heartbeat)
	defer cancel()
	if err := m.refreshView(rctx); err != nil && ctx.Err() == nil {
		m.log.Debug("cannot read the live members after "+what+"; keeping the previous view", "error", err)
	}
}

// liveAt reports whether d, a member of a view, counts as live at now:
// its lease has not passed, or it is this process.
func (m *Membership) liveAt(d Member, now time.Time) bool {
	return d.LiveAt(now) || (d.ID == m.selfID && d.Incarnation == m.selfIncarnation)
}

// LiveView returns the cached view of the live members, ordered by
// instance id: the last read (after Join, then after each heartbeat) less
// the members whose lease passed since, and always this process itself.
// It is empty before the first read. It does not talk to the server; safe
// for concurrent use.
func (m *Membership) LiveView() []Member {
	v := m.view.Load()
	if v == nil {
		return nil
	}
	now := m.opts.Now()
	out := make([]Member, 0, len(v.members))
	for _, d := range v.members {
		if m.liveAt(d, now) {
			out = append(out, d)
		}
	}
	return out
}

// Owns reports whether this member owns jobID among the live members of
// the cached view: whether Owner(jobID, LiveView()) is this instance.
// Before the first read of the view it reports true, so that a member that
// knows no one else claims at once. Ownership is an optimisation only
// (exactly-once is the claim's): a stale view costs at most a claim made
// at once by two members, or one made only after the grace. It does not
// talk to the server and does not allocate; safe for concurrent use.
func (m *Membership) Owns(jobID string) bool {
	v := m.view.Load()
	if v == nil {
		return true
	}
	now := m.opts.Now()
	var o ownerChoice
	for _, d := range v.members {
		if m.liveAt(d, now) {
			o.consider(jobID, d)
		}
	}
	return !o.all.any || o.best().ID == m.selfID
}

// Arms reports whether this member arms jobID's timer when the replicas
// divide the schedules: whether it is one of Armers(jobID, LiveView()).
// Before the first read of the view it reports true (a member that knows
// no one else arms every job). Like Owns, it does not talk to the server
// and does not allocate; safe for concurrent use.
func (m *Membership) Arms(jobID string) bool {
	v := m.view.Load()
	if v == nil {
		return true
	}
	now := m.opts.Now()
	var t top2
	for _, d := range v.members {
		if m.liveAt(d, now) {
			t.consider(jobID, d)
		}
	}
	return !t.first.any || t.first.best.ID == m.selfID || (t.second.any && t.second.best.ID == m.selfID)
}
