package runstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
)

// RecordMissed implements record.Store.
func (s *Store) RecordMissed(ctx context.Context, m record.MissedRange, next record.NextFunc, instance string, now time.Time) ([]record.MissedRange, error) {
	if err := s.consume(ctx, m.JobID, m.To, now); err != nil {
		return nil, err
	}
	covered, err := s.decidedIn(ctx, m.JobID, m.From, m.To)
	if err != nil {
		return nil, err
	}
	pieces := []record.MissedRange{m}
	if len(covered) > 0 {
		if m.From.Equal(m.To) {
			return nil, nil // the one slot is decided
		}
		if next == nil {
			s.log.Warn("missed slots not recorded: some are decided and the job's schedule is unknown",
				"job_id", m.JobID, "scheduled_at", m.From, "last_scheduled_at", m.To, "reason", m.Reason)
			return nil, nil
		}
		pieces = uncovered(m, covered, next)
	}
	var written []record.MissedRange
	for _, p := range pieces {
		doc := append(bson.D{
			{Key: "_id", Value: record.MissedID(p.JobID, p.From)}, {Key: "job_id", Value: p.JobID},
			{Key: "scheduled_at", Value: p.From}, {Key: "instance", Value: instance}, {Key: "fence", Value: int64(0)},
		}, s.missedFields(p.To, p.Count, p.Reason, now, "", "")...)
		_, err := s.runs.InsertOne(ctx, doc)
		if mongo.IsDuplicateKeyError(err) {
			continue // recorded already, here or on another replica
		}
		if err != nil {
			return written, fmt.Errorf("record missed slots of %s at %s in %s: %w: %w",
				p.JobID, p.From.UTC().Format(time.RFC3339), s.runs.Name(), record.ErrUnreachable, err)
		}
		written = append(written, p)
	}
	if len(written) > 0 {
		s.noticed()
	}
	return written, nil
}

// missedFields are the fields every missed record holds, whichever write
// makes it (RecordMissed's insert, or the record of a claimed slot turned
// missed by its claim, its end or Disown): the status, the last of the
// count slots it covers from its scheduled_at, their reason, when it was
// recorded (now), its expiry and, when its reason is notified, its notice
// (of the trace traceparent and tracestate name, if any).
func (s *Store) missedFields(last time.Time, count int64, reason string, now time.Time, traceparent, tracestate string) bson.D {
	return withTracedNotice(bson.D{
		{Key: "status", Value: record.StatusMissed}, {Key: "last_scheduled_at", Value: last},
		{Key: "count", Value: count}, {Key: "reason", Value: reason},
		{Key: "recorded_at", Value: now}, {Key: "expire_at", Value: now.Add(s.retention)},
	}, record.StatusMissed, reason, now, traceparent, tracestate)
}

// missedUpdate is the update turning the record of a claimed slot into a
// missed record of it: set (missedFields, and what the writer adds) set,
// and the fields of a run that started removed.
func missedUpdate(set bson.D) bson.D {
	return bson.D{{Key: "$set", Value: set},
		{Key: "$unset", Value: bson.D{{Key: "started_at", Value: ""}, {Key: "lease_until", Value: ""}}}}
}

// consume moves the job's last slot up to through, so that no claim takes
// a slot at or before it any more; a lock document that does not exist is
// created first (from job_runs, like a claim does).
func (s *Store) consume(ctx context.Context, jobID string, through, now time.Time) error {
	for range 2 {
		res, err := s.locks.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: jobID}, {Key: "last_slot", Value: bson.D{{Key: "$lt", Value: through}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "last_slot", Value: through}, {Key: "updated_at", Value: now}}}})
		if err != nil {
			return fmt.Errorf("move last slot of %s in %s: %w: %w", jobID, s.locks.Name(), record.ErrUnreachable, err)
		}
		if res.MatchedCount > 0 {
			return nil
		}
		err = s.locks.FindOne(ctx, bson.D{{Key: "_id", Value: jobID}},
			options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
		if err == nil {
			return nil // already at or past through (or damaged: the claim repairs it from job_runs)
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return fmt.Errorf("read lock %s in %s: %w: %w", jobID, s.locks.Name(), record.ErrUnreachable, err)
		}
		if err := s.initLock(ctx, jobID, now); err != nil {
			return err
		}
	}
	return nil
}

// span is a stretch of decided slots [from, to].
type span struct{ from, to time.Time }

// decidedIn returns the records of the job covering slots in [from, to]:
// records whose slot lies in it, and a missed range starting before from
// that reaches into it.
func (s *Store) decidedIn(ctx context.Context, jobID string, from, to time.Time) ([]span, error) {
	var out []span
	var before record.RunDoc
	err := s.runs.FindOne(ctx,
		bson.D{{Key: "job_id", Value: jobID}, {Key: "scheduled_at", Value: bson.D{{Key: "$lt", Value: from}}}},
		options.FindOne().SetSort(bson.D{{Key: "scheduled_at", Value: -1}}).
			SetProjection(bson.D{{Key: "scheduled_at", Value: 1}, {Key: "last_scheduled_at", Value: 1}})).Decode(&before)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return nil, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	case !before.LastScheduledAt.Before(from):
		out = append(out, span{from, before.LastScheduledAt})
	}
	cur, err := s.runs.Find(ctx,
		bson.D{{Key: "job_id", Value: jobID}, {Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lte", Value: to}}}},
		options.Find().SetProjection(bson.D{{Key: "scheduled_at", Value: 1}, {Key: "last_scheduled_at", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	}
	var docs []record.RunDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("runs of %s in %s: %w: %w", jobID, s.runs.Name(), record.ErrUnreachable, err)
	}
	for _, d := range docs {
		out = append(out, span{d.ScheduledAt, laterOf(d.ScheduledAt, d.LastScheduledAt)})
	}
	return out, nil
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// uncovered splits m into the stretches of its slots (walked with next)
// that no span covers.
func uncovered(m record.MissedRange, covered []span, next record.NextFunc) []record.MissedRange {
	sort.Slice(covered, func(i, j int) bool { return covered[i].from.Before(covered[j].from) })
	isCovered := func(t time.Time) bool {
		for _, c := range covered {
			if c.from.After(t) {
				return false
			}
			if !c.to.Before(t) {
				return true
			}
		}
		return false
	}
	var out []record.MissedRange
	var cur *record.MissedRange
	walked := int64(0)
	for t := m.From; !t.IsZero() && !t.After(m.To) && walked < record.MaxSlotWalk; t = next(t) {
		walked++
		if isCovered(t) {
			cur = nil
			continue
		}
		if cur == nil {
			out = append(out, record.MissedRange{JobID: m.JobID, From: t, To: t, Count: 1, Reason: m.Reason})
			cur = &out[len(out)-1]
			continue
		}
		cur.To = t
		cur.Count++
	}
	return out
}

// DecidedSlots implements record.Store.
func (s *Store) DecidedSlots(ctx context.Context, ids []string, notAfter time.Time) (map[string]time.Time, error) {
	// Not sized by ids: a start-up asks for every armed job, most of which
	// may have no decided slot yet.
	out := map[string]time.Time{}
	const chunk = 1000
	var missing []string
	for i := 0; i < len(ids); i += chunk {
		part := ids[i:min(i+chunk, len(ids))]
		cur, err := s.locks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: part}}}},
			options.Find().SetProjection(bson.D{{Key: "last_slot", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w: %w", s.locks.Name(), record.ErrUnreachable, err)
		}
		var locks []struct {
			ID       string    `bson:"_id"`
			LastSlot time.Time `bson:"last_slot"`
		}
		if err := cur.All(ctx, &locks); err != nil {
			return nil, fmt.Errorf("read %s: %w: %w", s.locks.Name(), record.ErrUnreachable, err)
		}
		seen := make(map[string]bool, len(locks))
		for _, l := range locks {
			if l.LastSlot.After(notAfter) {
				continue // decided since: job_runs says what was decided by then
			}
			seen[l.ID] = true
			if !l.LastSlot.IsZero() {
				out[l.ID] = l.LastSlot
			}
		}
		for _, id := range part {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
	}
	// A job without a lock document never fired, or its document was
	// deleted: job_runs says what was decided.
	for i := 0; i < len(missing); i += chunk {
		part := missing[i:min(i+chunk, len(missing))]
		cur, err := s.runs.Aggregate(ctx, mongo.Pipeline{
			{{Key: "$match", Value: bson.D{{Key: "job_id", Value: bson.D{{Key: "$in", Value: part}}},
				{Key: "scheduled_at", Value: bson.D{{Key: "$lte", Value: notAfter}}}}}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$job_id"},
				{Key: "slot", Value: bson.D{{Key: "$max", Value: "$scheduled_at"}}},
				{Key: "last", Value: bson.D{{Key: "$max", Value: "$last_scheduled_at"}}}}}},
		})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w: %w", s.runs.Name(), record.ErrUnreachable, err)
		}
		var newest []struct {
			ID   string    `bson:"_id"`
			Slot time.Time `bson:"slot"`
			Last time.Time `bson:"last"`
		}
		if err := cur.All(ctx, &newest); err != nil {
			return nil, fmt.Errorf("read %s: %w: %w", s.runs.Name(), record.ErrUnreachable, err)
		}
		for _, n := range newest {
			out[n.ID] = laterOf(n.Slot, n.Last)
		}
	}
	return out, nil
}
