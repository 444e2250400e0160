package daemon

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/schedulesink"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// Bounds of the recovery of a full read (recoverLastValid): its one query
// of the edit history reads at most recoverMaxEdits edits, within
// recoverTimeout.
const (
	recoverMaxEdits = 10_000
	recoverTimeout  = 10 * time.Second
)

// msgNotRecovered is logged, with job_id and reason, for each refused job
// a full read found with no last known good and for which the edit
// history gave no valid version: it is not armed.
const msgNotRecovered = "refused job not armed: no valid version of it recovered from the edit history"

// The reasons of msgNotRecovered.
const (
	// reasonHistoryUnreachable: the edit history could not be read.
	reasonHistoryUnreachable = "history_unreachable"
	// reasonNoEdits: the history holds no edit of the job (none was
	// recorded, or they expired after runs.retention).
	reasonNoEdits = "no_edits"
	// reasonNoValidVersion: every version the history reconstructs, back
	// to the job's insert or the oldest edit kept, is refused.
	reasonNoValidVersion = "no_valid_version"
	// reasonEditsBound: the job's edits were beyond the recovery's bound.
	reasonEditsBound = "edits_not_read"
)

// recoverLastValid is the schedules sink's recovery
// (schedulesink.Sink.WithRecovery): for jobs ids, whose documents a full
// read found refused while the engine holds no valid version of them, it
// reads their edits from the edit history in one query and
// reconstructs, walking back from each document as the read left it (the
// edit history's copy) as the timeline does (timeline.LastValid), the
// newest version the engine would accept (decoded and checked as a live
// document is, with the engine's zone and policy). A job with none is
// logged and left out (it stays unarmed). Nothing is written: a
// recovered version is not an edit.
func (s *Service) recoverLastValid(ids []string) map[string]schedulesink.Recovered {
	ids = slices.Sorted(slices.Values(ids))
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	coll := s.db.Collection(history.CollectionName)
	edits, cut, err := timeline.ReadEdits(ctx, coll, ids, recoverMaxEdits)
	if err != nil {
		err = fmt.Errorf("recover the last valid versions of %d refused jobs: %w", len(ids), err)
		for _, id := range ids {
			s.log.Warn(msgNotRecovered, "job_id", id, "reason", reasonHistoryUnreachable, "error", err)
		}
		return nil
	}
	out := make(map[string]schedulesink.Recovered)
	for _, id := range ids {
		reason := ""
		v, ok := timeline.LastValid(id, s.history.recorder.Document(id), edits[id], s.accepts)
		switch {
		case ok:
			out[id] = schedulesink.Recovered{Doc: v.Doc, EditedAt: v.WrittenAt, ReplacedAt: v.ReplacedAt}
			continue
		case cut != "" && id >= cut:
			reason = reasonEditsBound
		case len(edits[id]) == 0:
			reason = reasonNoEdits
		default:
			reason = reasonNoValidVersion
		}
		s.log.Warn(msgNotRecovered, "job_id", id, "reason", reason, "collection", coll.Name())
	}
	return out
}

// accepts reports whether the engine would arm doc: it decodes (the
// schedules sink's decoder) and passes scheduler.Check in the engine's
// default zone with its policy.
func (s *Service) accepts(doc bson.Raw) bool {
	sched, err := schedule.DecodeFields(doc)
	if err != nil {
		return false
	}
	_, err = scheduler.Check(sched, s.opts.Location, s.policy)
	return err == nil
}
