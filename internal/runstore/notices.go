package runstore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// NoticeKind returns the notice kind (package notify's outbox) of a record
// written with status and reason; false when it is not notified. A record
// written with a notified status carries its notice, set by the same write.
// Two reasons are left out because what caused them is not a failure, or
// has a notice of its own: a run stopped by its job's cancel_other policy
// for a later fire (ReasonReplaced: the policy doing what it was asked), and
// a slot not run because its job is paused (MissedPaused: the pause's).
func NoticeKind(status, reason string) (string, bool) {
	switch {
	case status == record.StatusFailed:
		return notify.KindFailed, true
	case status == record.StatusAbandoned && reason != record.ReasonReplaced:
		return notify.KindAbandoned, true
	case status == record.StatusMissed && reason != record.MissedPaused:
		return notify.KindMissed, true
	}
	return "", false
}

// withNotice appends to set the outbox element of a record written with
// status (and reason) at at, when it is notified.
func withNotice(set bson.D, status, reason string, at time.Time) bson.D {
	return withTracedNotice(set, status, reason, at, "", "")
}

// withTracedNotice is withNotice for an event of the trace whose W3C
// context is traceparent and tracestate.
func withTracedNotice(set bson.D, status, reason string, at time.Time, traceparent, tracestate string) bson.D {
	if kind, ok := NoticeKind(status, reason); ok {
		return append(set, notify.TracedOutbox(kind, at, traceparent, tracestate))
	}
	return set
}

// noticed tells the store's OnNotice hook (the local relay) that a write
// carried notices.
func (s *Store) noticed() {
	if s.onNotice != nil {
		s.onNotice()
	}
}

// noticedEnds calls noticed when one of ends carried a notice.
func (s *Store) noticedEnds(ends []record.LeaseEnd) {
	for _, e := range ends {
		if _, ok := NoticeKind(e.End.Status, e.End.Reason); ok {
			s.noticed()
			return
		}
	}
}

// NoticeSources returns job_runs and job_pauses as the notification
// relay's sources (notify.Source): their notices are written here with the
// records' own writes, and cleared here once the relay moved them.
func (s *Store) NoticeSources() []notify.Source {
	return []notify.Source{noticeSource{s.runs}, noticeSource{s.pausesColl()}}
}

// noticeSource is one outbox collection of the store.
type noticeSource struct{ coll *mongo.Collection }

func (o noticeSource) Name() string { return o.coll.Name() }

// Notices implements notify.Source: one find through the outbox index.
func (o noticeSource) Notices(ctx context.Context, limit int64) ([]bson.Raw, error) {
	cur, err := o.coll.Find(ctx, notify.PendingNotices(), options.Find().SetLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("read notices in %s: %w", o.coll.Name(), err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("read notices in %s: %w", o.coll.Name(), err)
	}
	return raws, nil
}

// ClearNotices implements notify.Source: one unordered bulkWrite.
func (o noticeSource) ClearNotices(ctx context.Context, clears []notify.Clear) error {
	models := make([]mongo.WriteModel, len(clears))
	for i, c := range clears {
		filter, update := c.Update()
		models[i] = mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
	}
	if _, err := o.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("clear %d notices in %s: %w", len(clears), o.coll.Name(), err)
	}
	return nil
}
