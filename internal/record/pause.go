package record

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/notify"
)

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
