package jobs

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/notify"
)

// noticeKinds maps the run statuses that are notified to their notice
// kind: a record written with one of them carries a notice (package
// notify's outbox) set by the same write.
var noticeKinds = map[string]string{
	StatusFailed:    notify.KindFailed,
	StatusAbandoned: notify.KindAbandoned,
	StatusMissed:    notify.KindMissed,
}

// noticeKind returns the notice kind of a record written with status and,
// for a missed record, reason; false when it is not notified.
func noticeKind(status, reason string) (string, bool) {
	// Every missed reason is notified; a reason whose cause has a notice
	// of its own (a slot not run because its job is paused) is left out
	// here.
	kind, ok := noticeKinds[status]
	return kind, ok
}

// withNotice appends to set the outbox element of a record written with
// status (and reason) at at, when it is notified.
func withNotice(set bson.D, status, reason string, at time.Time) bson.D {
	if kind, ok := noticeKind(status, reason); ok {
		return append(set, notify.Outbox(kind, at))
	}
	return set
}

// noticed tells the store's OnNotice hook (the local relay) that a write
// carried notices.
func (s *MongoStore) noticed() {
	if s.onNotice != nil {
		s.onNotice()
	}
}

// noticedEnds calls noticed when one of ends carried a notice.
func (s *MongoStore) noticedEnds(ends []LeaseEnd) {
	for _, e := range ends {
		if _, ok := noticeKind(e.End.Status, e.End.Reason); ok {
			s.noticed()
			return
		}
	}
}
