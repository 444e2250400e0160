package runstore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

func (s *Store) pausesColl() *mongo.Collection { return record.PausesCollectionOf(s.locks.Database()) }

// Paused implements record.Store: one find by _id.
func (s *Store) Paused(ctx context.Context, jobID string) (record.PauseDoc, bool, error) {
	raw, err := s.pausesColl().FindOne(ctx, bson.D{{Key: "_id", Value: jobID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return record.PauseDoc{}, false, nil
	}
	if err != nil {
		return record.PauseDoc{}, false, fmt.Errorf("read the pause of job %s in %s: %w", jobID, record.PausesCollection, err)
	}
	p, paused, damage := record.DecodePause(jobID, raw)
	if damage != nil {
		s.log.Error("pause document damaged", "job_id", jobID, "collection", record.PausesCollection, "error", damage)
	}
	return p, paused, nil
}

// pauseNoteErrorMax bounds the last run's error quoted in a pause note.
const pauseNoteErrorMax = 200

// PauseIfFailing implements record.Store: one find of the pause document,
// one find of the job's last c.Failures decided runs (index (job_id,
// scheduled_at)), and when they all failed one conditional upsert of the
// pause (a job already paused stays as it is).
func (s *Store) PauseIfFailing(ctx context.Context, c record.PauseCheck) (record.PauseDoc, bool, error) {
	if c.Failures <= 0 {
		return record.PauseDoc{}, false, nil
	}
	cur, paused, err := s.Paused(ctx, c.JobID)
	if err != nil || paused {
		return cur, false, err
	}
	filter := bson.D{{Key: "job_id", Value: c.JobID},
		{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{record.StatusSucceeded, record.StatusFailed}}}}}
	if !cur.ResumedAt.IsZero() {
		filter = append(filter, bson.E{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: cur.ResumedAt}}})
	}
	fc, err := s.runs.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: -1}}).
		SetLimit(int64(c.Failures)).SetProjection(bson.D{{Key: "status", Value: 1}}))
	if err != nil {
		return record.PauseDoc{}, false, fmt.Errorf("read the last runs of job %s in %s: %w", c.JobID, s.runs.Name(), err)
	}
	var last []record.RunDoc
	if err := fc.All(ctx, &last); err != nil {
		return record.PauseDoc{}, false, fmt.Errorf("read the last runs of job %s in %s: %w", c.JobID, s.runs.Name(), err)
	}
	if len(last) < c.Failures {
		return record.PauseDoc{}, false, nil
	}
	for _, d := range last {
		if d.Status != record.StatusFailed {
			return record.PauseDoc{}, false, nil
		}
	}
	msg := c.Error
	if len(msg) > pauseNoteErrorMax {
		msg = msg[:pauseNoteErrorMax] + "…"
	}
	p := record.PauseDoc{JobID: c.JobID, State: record.PauseStatePaused, PausedAt: c.Now, Failures: c.Failures, RunID: c.RunID,
		Instance: c.Instance, UpdatedAt: c.Now, ResumedAt: cur.ResumedAt, ResumedBy: cur.ResumedBy,
		Note: fmt.Sprintf("paused after %d consecutive failed slots; the last, run %s: %s", c.Failures, c.RunID, msg)}
	_, err = s.pausesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: c.JobID}, {Key: "state", Value: bson.D{{Key: "$ne", Value: record.PauseStatePaused}}}},
		bson.D{{Key: "$set", Value: s.pauseSet(p)}}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return record.PauseDoc{}, false, nil // paused meanwhile, by another replica
	}
	if err != nil {
		return record.PauseDoc{}, false, fmt.Errorf("pause job %s in %s: %w", c.JobID, record.PausesCollection, err)
	}
	s.noticed()
	return p, true, nil
}

// pauseSet is the $set of the pause write: the pause's fields and its
// notification's notice (notify.PauseNotice), so the notice is written
// atomically with the pause (job_pauses is an outbox of the relay).
func (s *Store) pauseSet(p record.PauseDoc) bson.D {
	return bson.D{{Key: "state", Value: p.State}, {Key: "paused_at", Value: p.PausedAt}, {Key: "note", Value: p.Note},
		{Key: "failures", Value: p.Failures}, {Key: "run_id", Value: p.RunID}, {Key: "instance", Value: p.Instance},
		{Key: "updated_at", Value: p.UpdatedAt}, notify.PauseNotice(p.PausedAt, p.Note)}
}

// PausedJobs returns the pauses in force, by job id: one find on
// job_pauses (a small collection: one document per job ever paused).
func (s *Store) PausedJobs(ctx context.Context) (map[string]record.PauseDoc, error) {
	cur, err := s.pausesColl().Find(ctx, bson.D{{Key: "state", Value: record.PauseStatePaused}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", record.PausesCollection, err)
	}
	defer func() { _ = cur.Close(ctx) }()
	out := map[string]record.PauseDoc{}
	for cur.Next(ctx) {
		id, _ := cur.Current.Lookup("_id").StringValueOK()
		p, paused, damage := record.DecodePause(id, cur.Current)
		if damage != nil {
			s.log.Error("pause document damaged", "job_id", id, "collection", record.PausesCollection, "error", damage)
		}
		if paused && id != "" {
			out[id] = p
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", record.PausesCollection, err)
	}
	return out, nil
}
