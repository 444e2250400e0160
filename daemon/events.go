package daemon

import (
	"iter"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/schedule"
)

// maxReloadEvents is the most schedule events a full reload sends one by
// one; a reload that changed more sends one event for every job (id "").
const maxReloadEvents = 100

// eventSink is the watcher's sink with /api/events behind it: after the
// engine applied a document (stream and poll mode alike) it publishes the
// job's schedule event. Publishing never blocks (httpapi.Broker).
type eventSink struct {
	changestream.Sink
	events *httpapi.Broker
}

// Upsert implements changestream.Sink.
func (s eventSink) Upsert(doc bson.Raw) {
	s.Sink.Upsert(doc)
	if id := jobIDOf(doc.Lookup("_id")); id != "" {
		s.events.ScheduleChanged(id)
	}
}

// Delete implements changestream.Sink.
func (s eventSink) Delete(id bson.RawValue) {
	s.Sink.Delete(id)
	if jobID := jobIDOf(id); jobID != "" {
		s.events.ScheduleChanged(jobID)
	}
}

// ReplaceAll implements changestream.Sink: one event per changed job, or
// one for every job when many changed; none when nothing changed (a poll
// that found the collection as it was).
func (s eventSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	changed, err := s.Sink.ReplaceAll(docs)
	switch {
	case len(changed) == 0:
	case len(changed) > maxReloadEvents:
		s.events.ScheduleChanged("")
	default:
		for _, id := range changed {
			shown, _ := schedule.RefusedID(id)
			s.events.ScheduleChanged(shown)
		}
	}
	return changed, err
}

// jobIDOf is the job id an _id names as the API shows it (the rendering,
// for a refused _id); "" when it names none.
func jobIDOf(v bson.RawValue) string {
	id, _ := schedule.DecodeID(v)
	if id == "" {
		return ""
	}
	shown, _ := schedule.RefusedID(id)
	return shown
}
