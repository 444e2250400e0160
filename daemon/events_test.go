package daemon

import (
	"context"
	"iter"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/httpapi"
)

// recordingSink is a changestream.Sink that changes what ReplaceAll is
// told to report.
type recordingSink struct{ changed []string }

func (recordingSink) Upsert(bson.Raw)      {}
func (recordingSink) Delete(bson.RawValue) {}
func (s recordingSink) ReplaceAll(iter.Seq2[bson.Raw, error]) ([]string, error) {
	return s.changed, nil
}

func nextEvent(t *testing.T, c <-chan httpapi.Event) httpapi.Event {
	t.Helper()
	select {
	case ev := <-c:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return httpapi.Event{}
	}
}

// Applied upserts and deletes publish their job's schedule event; a full
// reload publishes the jobs it changed, or one "" for many, none when it
// changed nothing.
func TestEventSinkPublishes(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{Buffer: 1024})
	c, cancel := b.Subscribe()
	defer cancel()
	doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: "job-a"}, {Key: "cron_expr", Value: "* * * * *"}})
	id := bson.RawValue{Type: bson.TypeString, Value: bsoncoreString("job-b")}
	eventSink{Sink: recordingSink{}, events: b}.Upsert(doc)
	eventSink{Sink: recordingSink{}, events: b}.Delete(id)
	eventSink{Sink: recordingSink{}, events: b}.ReplaceAll(nil)
	eventSink{Sink: recordingSink{changed: []string{"job-c"}}, events: b}.ReplaceAll(nil)
	many := make([]string, maxReloadEvents+1)
	eventSink{Sink: recordingSink{changed: many}, events: b}.ReplaceAll(nil)
	for _, want := range []string{"job-a", "job-b", "job-c", ""} {
		ev := nextEvent(t, c)
		if d, ok := ev.Data.(httpapi.ScheduleData); ev.Name != httpapi.EventSchedule || !ok || d.ID != want {
			t.Errorf("event %+v, want schedule %q", ev, want)
		}
	}
	select {
	case ev := <-c:
		t.Errorf("unexpected event %+v", ev)
	default:
	}
}

// The fire path's run starts and ends are run events.
func TestFireHooksPublishRuns(t *testing.T) {
	b := httpapi.NewBroker(httpapi.BrokerOptions{})
	c, cancel := b.Subscribe()
	defer cancel()
	h := fireHooks(nil, b)
	h.Dispatched(context.Background(), "job-a", "", time.Now(), time.Now())
	h.RunEnded("job-a", "succeeded")
	for _, want := range []string{"running", "succeeded"} {
		ev := nextEvent(t, c)
		if d, ok := ev.Data.(httpapi.RunData); ev.Name != httpapi.EventRun || !ok || d.ID != "job-a" || d.Status != want {
			t.Errorf("event %+v, want run %s", ev, want)
		}
	}
}

func bsoncoreString(s string) []byte {
	_, v, _ := bson.MarshalValue(s)
	return v
}
