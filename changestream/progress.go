package changestream

import (
	"iter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ReloadProgress is a full read under way: the collection read for a full
// reload, or the state file read for a warm start.
type ReloadProgress struct {
	// Reason is the full reload's reason (ReasonStartup, ReasonResync…),
	// or ReasonStateFile for a warm start; empty when no read runs.
	Reason string
	// StartedAt is when the read began.
	StartedAt time.Time
	// Documents and Bytes count what was read so far.
	Documents, Bytes int64
}

// ReasonStateFile is ReloadProgress.Reason while the sink is armed from
// the state file (a warm start).
const ReasonStateFile = "state_file"

// progressLogEvery is how often a long full read logs its progress.
const progressLogEvery = 5 * time.Second

// progressCheckEvery is how many documents go by between two looks at the
// clock for progressLogEvery.
const progressCheckEvery = 4096

// read counts one full read for the status, the progress log and the
// completion log.
type read struct {
	w         *Watcher
	reason    string
	start     time.Time
	docs      int64
	bytes     int64
	lastLog   time.Time
	readWait  time.Duration // time spent waiting for the next document
	apply     time.Duration // time the sink spent between two documents
	published int64         // docs at the last status update
}

// beginRead starts the status of a full read for reason.
func (w *Watcher) beginRead(reason string, start time.Time) *read {
	w.update(func(s *Status) { s.Reload = ReloadProgress{Reason: reason, StartedAt: start} })
	return &read{w: w, reason: reason, start: start, lastLog: start}
}

// endRead clears the status of the full read.
func (w *Watcher) endRead() { w.update(func(s *Status) { s.Reload = ReloadProgress{} }) }

// count passes docs on, counting them into the status and logging the
// progress of a long read every progressLogEvery.
func (r *read) count(docs iter.Seq2[bson.Raw, error]) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		waitFrom := time.Now()
		for d, err := range docs {
			got := time.Now()
			r.readWait += got.Sub(waitFrom)
			if err == nil {
				r.docs++
				r.bytes += int64(len(d))
				if r.docs%progressCheckEvery == 0 {
					r.publish(got)
				}
			}
			ok := yield(d, err)
			waitFrom = time.Now()
			r.apply += waitFrom.Sub(got)
			if !ok {
				break
			}
		}
		r.publish(time.Now())
	}
}

// publish puts the counts in the status and logs them when the last log
// is progressLogEvery old.
func (r *read) publish(now time.Time) {
	if r.docs == r.published {
		return
	}
	r.published = r.docs
	docs, bytes := r.docs, r.bytes
	r.w.update(func(s *Status) { s.Reload.Documents, s.Reload.Bytes = docs, bytes })
	if now.Sub(r.lastLog) < progressLogEvery {
		return
	}
	r.lastLog = now
	elapsed := now.Sub(r.start)
	r.w.log.Info("full read in progress", "reason", r.reason, "documents", docs, "bytes", bytes,
		"elapsed", elapsed.Round(time.Millisecond), "documents_per_second", rate(docs, elapsed))
}

// rate is n per second over d, rounded.
func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}
