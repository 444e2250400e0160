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

// noticeFor returns the outbox element of a record written with status at
// at, and whether that status is notified.
func noticeFor(status string, at time.Time) (bson.E, bool) {
	kind, ok := noticeKinds[status]
	if !ok {
		return bson.E{}, false
	}
	return notify.Outbox(kind, at), true
}

// withNotice appends to set the outbox element of status at at, when that
// status is notified.
func withNotice(set bson.D, status string, at time.Time) bson.D {
	if e, ok := noticeFor(status, at); ok {
		return append(set, e)
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
		if _, ok := noticeKinds[e.End.Status]; ok {
			s.noticed()
			return
		}
	}
}
