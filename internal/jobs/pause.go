package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/schedule"
)

// PausesCollection holds one document per job paused after consecutive
// failed slots (Spec.PauseAfterFailures): the daemons write the pause, an
// operator clears it (`cronswap schedules resume ID`). It is apart from
// schedules, which the daemon never writes, and from job_locks, whose
// repair would drop it. docs/retry.md has its fields.
const PausesCollection = "job_pauses"

// States of a job_pauses document.
const (
	// PauseStatePaused: the job's fires are not run (each is recorded
	// missed, reason MissedPaused) until it is resumed.
	PauseStatePaused = "paused"
	// PauseStateResumed: an operator resumed the job; only failures of
	// slots after resumed_at count towards the next pause.
	PauseStateResumed = "resumed"
)

// MissedPaused is the reason of a missed record of a slot not run because
// its job was paused after consecutive failures, and the NotRun reason of
// such a fire.
const MissedPaused = "paused"

// NotRunPaused is passed to Hooks.NotRun for a fire of a paused job.
const NotRunPaused = MissedPaused

// PauseDoc is one document of job_pauses.
type PauseDoc struct {
	// JobID is the job's id (the schedules _id).
	JobID string `bson:"_id" json:"job_id"`
	// State is PauseStatePaused or PauseStateResumed.
	State string `bson:"state" json:"state"`
	// PausedAt is when the job was paused; Note says why (the failures
	// and the last run's error), Failures how many consecutive failed
	// slots paused it, RunID the last of them, Instance the replica that
	// paused it.
	PausedAt time.Time `bson:"paused_at,omitempty" json:"paused_at,omitzero"`
	Note     string    `bson:"note,omitempty" json:"note,omitempty"`
	Failures int       `bson:"failures,omitempty" json:"failures,omitempty"`
	RunID    string    `bson:"run_id,omitempty" json:"run_id,omitempty"`
	Instance string    `bson:"instance,omitempty" json:"instance,omitempty"`
	// ResumedAt and ResumedBy are set by the last resume.
	ResumedAt time.Time `bson:"resumed_at,omitempty" json:"resumed_at,omitzero"`
	ResumedBy string    `bson:"resumed_by,omitempty" json:"resumed_by,omitempty"`
	UpdatedAt time.Time `bson:"updated_at" json:"updated_at"`
	// Notice is the pause's pending notification (notify.PauseNotice),
	// written by the pause itself; the relay removes it once moved.
	Notice *notify.Notice `bson:"notice,omitempty" json:"-"`
}

// Paused reports whether the document pauses its job.
func (p PauseDoc) Paused() bool { return p.State == PauseStatePaused }

// PauseCheck asks whether a job is to be paused after its run RunID
// ended failed: whether its last Failures decided runs since its last
// resume all failed.
type PauseCheck struct {
	JobID    string
	RunID    string
	Failures int
	// Error is the last run's error, for the note.
	Error    string
	Instance string
	Now      time.Time
}

// PauseStore is the part of a store that pauses jobs after failures: a
// BatchStore that implements it lets the runner honour
// Spec.PauseAfterFailures.
type PauseStore interface {
	// Paused returns the job's pause document and whether it pauses the
	// job (a damaged document is logged and does not).
	Paused(ctx context.Context, jobID string) (PauseDoc, bool, error)
	// PauseIfFailing pauses the job when its last c.Failures runs that
	// succeeded or failed, of slots after its last resume, all failed;
	// paused reports whether this call paused it.
	PauseIfFailing(ctx context.Context, c PauseCheck) (p PauseDoc, paused bool, err error)
}

// PausesCollectionOf returns db's job_pauses with the fire path's
// concerns (majority writes and reads, as Collections).
func PausesCollectionOf(db *mongo.Database) *mongo.Collection {
	return db.Collection(PausesCollection,
		options.Collection().SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority()))
}

func (s *MongoStore) pausesColl() *mongo.Collection { return PausesCollectionOf(s.locks.Database()) }

// Paused implements PauseStore: one find by _id.
func (s *MongoStore) Paused(ctx context.Context, jobID string) (PauseDoc, bool, error) {
	raw, err := s.pausesColl().FindOne(ctx, bson.D{{Key: "_id", Value: jobID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return PauseDoc{}, false, nil
	}
	if err != nil {
		return PauseDoc{}, false, fmt.Errorf("read the pause of job %s in %s: %w", jobID, PausesCollection, err)
	}
	p, paused, damage := DecodePause(jobID, raw)
	if damage != nil {
		s.log.Error("pause document damaged", "job_id", jobID, "collection", PausesCollection, "error", damage)
	}
	return p, paused, nil
}

// DecodePause reads a job_pauses document leniently: it pauses its job
// when its state is exactly PauseStatePaused, whatever else is wrong with
// it. damage, when not nil, says what is wrong (a document without a
// valid state does not pause its job).
func DecodePause(jobID string, raw bson.Raw) (p PauseDoc, paused bool, damage error) {
	state, ok := raw.Lookup("state").StringValueOK()
	if err := bson.Unmarshal(raw, &p); err != nil {
		p = PauseDoc{JobID: jobID, State: state}
		damage = fmt.Errorf("pause document of job %s in %s damaged: %w", jobID, PausesCollection, err)
	}
	switch {
	case ok && state == PauseStatePaused:
		return p, true, damage
	case ok && state == PauseStateResumed:
		return p, false, damage
	default:
		return p, false, fmt.Errorf("pause document of job %s in %s has no valid state (%s; want %q or %q): it does not pause the job",
			jobID, PausesCollection, raw.Lookup("state").String(), PauseStatePaused, PauseStateResumed)
	}
}

// pauseNoteErrorMax bounds the last run's error quoted in a pause note.
const pauseNoteErrorMax = 200

// PauseIfFailing implements PauseStore: one find of the pause document,
// one find of the job's last c.Failures decided runs (index (job_id,
// scheduled_at)), and when they all failed one conditional upsert of the
// pause (a job already paused stays as it is).
func (s *MongoStore) PauseIfFailing(ctx context.Context, c PauseCheck) (PauseDoc, bool, error) {
	if c.Failures <= 0 {
		return PauseDoc{}, false, nil
	}
	cur, paused, err := s.Paused(ctx, c.JobID)
	if err != nil || paused {
		return cur, false, err
	}
	filter := bson.D{{Key: "job_id", Value: c.JobID},
		{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{StatusSucceeded, StatusFailed}}}}}
	if !cur.ResumedAt.IsZero() {
		filter = append(filter, bson.E{Key: "scheduled_at", Value: bson.D{{Key: "$gt", Value: cur.ResumedAt}}})
	}
	fc, err := s.runs.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "scheduled_at", Value: -1}}).
		SetLimit(int64(c.Failures)).SetProjection(bson.D{{Key: "status", Value: 1}}))
	if err != nil {
		return PauseDoc{}, false, fmt.Errorf("read the last runs of job %s in %s: %w", c.JobID, s.runs.Name(), err)
	}
	var last []RunDoc
	if err := fc.All(ctx, &last); err != nil {
		return PauseDoc{}, false, fmt.Errorf("read the last runs of job %s in %s: %w", c.JobID, s.runs.Name(), err)
	}
	if len(last) < c.Failures {
		return PauseDoc{}, false, nil
	}
	for _, d := range last {
		if d.Status != StatusFailed {
			return PauseDoc{}, false, nil
		}
	}
	msg := c.Error
	if len(msg) > pauseNoteErrorMax {
		msg = msg[:pauseNoteErrorMax] + "…"
	}
	p := PauseDoc{JobID: c.JobID, State: PauseStatePaused, PausedAt: c.Now, Failures: c.Failures, RunID: c.RunID,
		Instance: c.Instance, UpdatedAt: c.Now, ResumedAt: cur.ResumedAt, ResumedBy: cur.ResumedBy,
		Note: fmt.Sprintf("paused after %d consecutive failed slots; the last, run %s: %s", c.Failures, c.RunID, msg)}
	_, err = s.pausesColl().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: c.JobID}, {Key: "state", Value: bson.D{{Key: "$ne", Value: PauseStatePaused}}}},
		bson.D{{Key: "$set", Value: s.pauseSet(p)}}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return PauseDoc{}, false, nil // paused meanwhile, by another replica
	}
	if err != nil {
		return PauseDoc{}, false, fmt.Errorf("pause job %s in %s: %w", c.JobID, PausesCollection, err)
	}
	s.noticed()
	return p, true, nil
}

// pauseSet is the $set of the pause write: the pause's fields and its
// notification's notice (notify.PauseNotice), so the notice is written
// atomically with the pause (job_pauses is an outbox of the relay).
func (s *MongoStore) pauseSet(p PauseDoc) bson.D {
	return bson.D{{Key: "state", Value: p.State}, {Key: "paused_at", Value: p.PausedAt}, {Key: "note", Value: p.Note},
		{Key: "failures", Value: p.Failures}, {Key: "run_id", Value: p.RunID}, {Key: "instance", Value: p.Instance},
		{Key: "updated_at", Value: p.UpdatedAt}, notify.PauseNotice(p.PausedAt, p.Note)}
}

// ResumePaused clears the pause of job jobID in pauses (job_pauses): state
// resumed, with when and by whom. It reports whether the job was paused.
func ResumePaused(ctx context.Context, pauses *mongo.Collection, jobID, by string, now time.Time) (bool, error) {
	res, err := pauses.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: jobID}, {Key: "state", Value: PauseStatePaused}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: PauseStateResumed}, {Key: "resumed_at", Value: now},
			{Key: "resumed_by", Value: by}, {Key: "updated_at", Value: now}}}})
	if err != nil {
		return false, fmt.Errorf("resume job %s in %s: %w", jobID, pauses.Name(), err)
	}
	return res.ModifiedCount > 0, nil
}

// paused reports whether d's job is paused after failures (one read, only
// for actions with PauseAfterFailures): its fire is then not run, and is
// recorded missed (MissedPaused). A read that fails lets the fire go on
// to its claim, which fails the same way when the database is gone.
func (r *Runner) paused(d schedule.Due, deadline time.Duration, spec Spec) bool {
	if r.pauses == nil || spec.PauseAfterFailures <= 0 {
		return false
	}
	ctx, cancel := r.opCtx()
	p, paused, err := r.pauses.Paused(ctx, d.Schedule.ID)
	cancel()
	if err != nil {
		r.log.Warn("could not read the job's pause; claiming the fire", "job_id", d.Schedule.ID,
			"scheduled_at", d.Slot.UTC(), "error", err)
		return false
	}
	if !paused {
		return false
	}
	r.log.Info("fire not run: the job is paused after consecutive failures", "job_id", d.Schedule.ID,
		"scheduled_at", d.Slot.UTC(), "paused_at", p.PausedAt, "note", p.Note)
	r.drop(d, deadline, NotRunPaused, "")
	return true
}

// afterEnd follows a run's end once it is written: a retrying attempt
// gets its local timer, and a failed slot of an action with
// PauseAfterFailures may pause its job.
func (r *Runner) afterEnd(log *slog.Logger, d schedule.Due, spec Spec, l Lease, end RunEnd) {
	switch {
	case end.Status == StatusRetrying:
		logRetry(log, l, end)
		r.retries.schedule(d, l.RunID, l.Attempt, end.RetryAt)
	case end.Status == StatusFailed && spec.PauseAfterFailures > 0 && r.pauses != nil:
		ctx, cancel := r.opCtx()
		p, paused, err := r.pauses.PauseIfFailing(ctx, PauseCheck{JobID: l.JobID, RunID: l.RunID,
			Failures: spec.PauseAfterFailures, Error: end.Error, Instance: r.opts.InstanceID, Now: end.EndedAt})
		cancel()
		switch {
		case err != nil:
			log.Warn("could not check whether the job is to be paused after failures", "error", err)
		case paused:
			log.Warn("job paused after consecutive failed slots; `cronswap schedules resume` clears it",
				"failures", p.Failures, "note", p.Note)
		}
	}
}

// PausedJobs returns the pauses in force, by job id: one find on
// job_pauses (a small collection: one document per job ever paused).
func (s *MongoStore) PausedJobs(ctx context.Context) (map[string]PauseDoc, error) {
	cur, err := s.pausesColl().Find(ctx, bson.D{{Key: "state", Value: PauseStatePaused}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", PausesCollection, err)
	}
	defer func() { _ = cur.Close(ctx) }()
	out := map[string]PauseDoc{}
	for cur.Next(ctx) {
		id, _ := cur.Current.Lookup("_id").StringValueOK()
		p, paused, damage := DecodePause(id, cur.Current)
		if damage != nil {
			s.log.Error("pause document damaged", "job_id", id, "collection", PausesCollection, "error", damage)
		}
		if paused && id != "" {
			out[id] = p
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", PausesCollection, err)
	}
	return out, nil
}
