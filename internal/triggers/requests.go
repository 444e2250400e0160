package triggers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// MaxBackfillSlots bounds the slots one backfill asks for.
const MaxBackfillSlots = 10_000

// RunNow inserts a run-now request for job (args, when not nil, replace
// the schedule's) and returns its _id (an ObjectId).
func RunNow(ctx context.Context, coll *mongo.Collection, job string, args bson.Raw, by string, now time.Time) (bson.ObjectID, error) {
	id := bson.NewObjectID()
	doc := bson.D{{Key: FieldID, Value: id}, {Key: FieldJobID, Value: job}, {Key: FieldRequestedAt, Value: now}}
	if args != nil {
		doc = append(doc, bson.E{Key: FieldArgs, Value: args})
	}
	if by != "" {
		doc = append(doc, bson.E{Key: FieldRequestedBy, Value: by})
	}
	if _, err := coll.InsertOne(ctx, doc); err != nil {
		return id, fmt.Errorf("insert a trigger of %s into %s: %w", job, coll.Name(), err)
	}
	return id, nil
}

// Get reads request id (its rendering, a string _id or ObjectId hex);
// nil, nil when there is none.
func Get(ctx context.Context, coll *mongo.Collection, key string) (bson.M, error) {
	ids := bson.A{key}
	if oid, err := bson.ObjectIDFromHex(key); err == nil {
		ids = append(ids, oid)
	}
	var m bson.M
	err := coll.FindOne(ctx, bson.D{{Key: FieldID, Value: bson.D{{Key: "$in", Value: ids}}}}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trigger %s in %s: %w", key, coll.Name(), err)
	}
	return m, nil
}

// BackfillSlot is one slot of a backfill plan.
type BackfillSlot struct {
	Slot  time.Time `json:"slot"`
	RunID string    `json:"run_id"`
	// Recorded is the status of the slot's record when it has one under
	// its run id (the slot is decided and is not asked for); "missed" when
	// a missed range covers it (it is asked for).
	Recorded string `json:"recorded,omitempty"`
	// Requested: a backfill request for the slot exists already (its
	// status, StatusPending while none).
	Requested string `json:"requested,omitempty"`
}

// Wanted reports whether the slot is to be asked for: it has no record
// of its own and no request yet.
func (b BackfillSlot) Wanted() bool {
	return (b.Recorded == "" || b.Recorded == record.StatusMissed) && b.Requested == ""
}

// PlanBackfill lists the cron slots of sched in [from, to] (to at most
// now), oldest first, with what is recorded and requested for each. loc
// is the default time zone of the expression.
func PlanBackfill(ctx context.Context, db *mongo.Database, sched schedule.Schedule, loc *time.Location, from, to, now time.Time) ([]BackfillSlot, error) {
	cs, err := sched.Parse(loc)
	if err != nil {
		return nil, err
	}
	if to.After(now) {
		to = now
	}
	var plan []BackfillSlot
	for t := cs.Next(from.Add(-time.Second)); !t.IsZero() && !t.After(to); t = cs.Next(t) {
		if len(plan) == MaxBackfillSlots {
			return nil, fmt.Errorf("more than %d slots of %s from %s to %s: backfill a shorter range", MaxBackfillSlots, sched.ID,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		}
		slot := t.UTC()
		plan = append(plan, BackfillSlot{Slot: slot, RunID: record.RunID(sched.ID, slot)})
	}
	if len(plan) == 0 {
		return plan, nil
	}
	runs := db.Collection(record.RunsCollection)
	cur, err := runs.Find(ctx, bson.D{{Key: "job_id", Value: sched.ID},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "scheduled_at", Value: bson.D{{Key: "$gte", Value: plan[0].Slot}, {Key: "$lte", Value: plan[len(plan)-1].Slot}}}},
			bson.D{{Key: "status", Value: record.StatusMissed}, {Key: "last_scheduled_at", Value: bson.D{{Key: "$gte", Value: plan[0].Slot}}},
				{Key: "scheduled_at", Value: bson.D{{Key: "$lte", Value: plan[len(plan)-1].Slot}}}},
		}}},
		options.Find().SetProjection(bson.D{{Key: "status", Value: 1}, {Key: "scheduled_at", Value: 1}, {Key: "last_scheduled_at", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read the records of %s in %s: %w", sched.ID, runs.Name(), err)
	}
	var recs []record.RunDoc
	if err := cur.All(ctx, &recs); err != nil {
		return nil, fmt.Errorf("read the records of %s in %s: %w", sched.ID, runs.Name(), err)
	}
	byID := map[string]string{}
	var missed []record.RunDoc
	for _, r := range recs {
		if r.Status == record.StatusMissed {
			missed = append(missed, r)
			continue
		}
		byID[r.ID] = r.Status
	}
	ids := bson.A{}
	for i := range plan {
		p := &plan[i]
		p.Recorded = byID[p.RunID]
		for _, m := range missed {
			last := m.LastScheduledAt
			if last.IsZero() {
				last = m.ScheduledAt
			}
			if p.Recorded == "" && !p.Slot.Before(m.ScheduledAt) && !p.Slot.After(last) {
				p.Recorded = record.StatusMissed
			}
		}
		ids = append(ids, BackfillIDPrefix+p.RunID)
	}
	reqs := Collection(db)
	cur, err = reqs.Find(ctx, bson.D{{Key: FieldID, Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: FieldStatus, Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read the backfill requests of %s in %s: %w", sched.ID, reqs.Name(), err)
	}
	var got []struct {
		ID     string `bson:"_id"`
		Status string `bson:"status"`
	}
	if err := cur.All(ctx, &got); err != nil {
		return nil, fmt.Errorf("read the backfill requests of %s in %s: %w", sched.ID, reqs.Name(), err)
	}
	requested := map[string]string{}
	for _, g := range got {
		requested[g.ID] = g.Status
		if g.Status == "" {
			requested[g.ID] = StatusPending
		}
	}
	for i := range plan {
		plan[i].Requested = requested[BackfillIDPrefix+plan[i].RunID]
	}
	return plan, nil
}

// WantedSlots are the slots of plan that RequestBackfill asks for.
func WantedSlots(plan []BackfillSlot) []time.Time {
	var out []time.Time
	for _, p := range plan {
		if p.Wanted() {
			out = append(out, p.Slot)
		}
	}
	return out
}

// RequestBackfill inserts one backfill request per wanted slot of plan,
// oldest first (the daemons offer them in that order, at a bounded rate),
// and returns how many it inserted; a request that appeared meanwhile is
// left as it is. beforeFirstSeen marks the requests FieldBeforeFirstSeen
// (the caller was told to run slots from before the job's first sighting).
func RequestBackfill(ctx context.Context, coll *mongo.Collection, job string, plan []BackfillSlot, by string, beforeFirstSeen bool, now time.Time) (int, error) {
	var docs []any
	for _, p := range plan {
		if !p.Wanted() {
			continue
		}
		d := bson.D{{Key: FieldID, Value: BackfillIDPrefix + p.RunID}, {Key: FieldJobID, Value: job},
			{Key: FieldSlot, Value: p.Slot}, {Key: FieldRequestedAt, Value: now}}
		if by != "" {
			d = append(d, bson.E{Key: FieldRequestedBy, Value: by})
		}
		if beforeFirstSeen {
			d = append(d, bson.E{Key: FieldBeforeFirstSeen, Value: true})
		}
		docs = append(docs, d)
	}
	if len(docs) == 0 {
		return 0, nil
	}
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(true))
	if err == nil {
		return len(docs), nil
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil {
		// Ordered: the inserts stop at the first error; a duplicate (asked
		// for meanwhile) is passed over and the rest sent again.
		if len(bwe.WriteErrors) == 1 && bwe.WriteErrors[0].Code == 11000 {
			i := bwe.WriteErrors[0].Index
			rest := plan[:0:0]
			for _, d := range docs[i+1:] {
				id := d.(bson.D)[0].Value.(string)
				for _, p := range plan {
					if BackfillIDPrefix+p.RunID == id {
						rest = append(rest, p)
					}
				}
			}
			more, err := RequestBackfill(ctx, coll, job, rest, by, beforeFirstSeen, now)
			return i + more, err
		}
	}
	return 0, fmt.Errorf("insert backfill requests of %s into %s: %w", job, coll.Name(), err)
}
