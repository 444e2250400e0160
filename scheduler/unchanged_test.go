package scheduler

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/schedule"
)

// TestUnchangedRuleCoversEveryField walks the fields of schedule.Schedule
// by reflection, so a field added to it is covered without editing this
// test. Starting from one armed schedule, it changes one field at a time and
// checks what Reload makes of it:
//   - a timing field (those of schedule.Timing) re-arms the timer;
//   - updated_at is informational: nothing changed, same timer;
//   - any other field is a change of the job (Sync would list it) that keeps
//     the timer, and the next fire carries the new value.
func TestUnchangedRuleCoversEveryField(t *testing.T) {
	base := schedule.Schedule{
		ID: "job", CronExpr: "* * * * * *", Timezone: "UTC", Enabled: true,
		Job: "act", Category: "cat", Args: `{"a":1}`,
		UpdatedAt: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC),
	}
	timing := map[string]bool{}
	for f := range reflect.TypeOf(schedule.Timing{}).Fields() {
		timing[f.Name] = true
	}
	// Values that keep a timing field valid; any other field gets a value
	// derived from its kind.
	valid := map[string]any{"CronExpr": "*/2 * * * * *", "Timezone": "Asia/Seoul", "DST": schedule.DSTPlain}

	typ := reflect.TypeOf(base)
	if typ.NumField() < 8 {
		t.Fatalf("schedule.Schedule has %d fields; the walk below sees too few", typ.NumField())
	}
	for f := range typ.Fields() {
		t.Run(f.Name, func(t *testing.T) {
			mod := base
			v := reflect.ValueOf(&mod).Elem().FieldByIndex(f.Index)
			if alt, ok := valid[f.Name]; ok {
				v.Set(reflect.ValueOf(alt))
			} else {
				changeValue(t, f, v)
			}
			if reflect.DeepEqual(mod, base) {
				t.Fatalf("changing %s left the schedule equal", f.Name)
			}

			var (
				mu  sync.Mutex
				got []schedule.Due
			)
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			// Not started: only the test runs the entry, on its own clock.
			e := New(Options{Shards: 2, Logger: quiet(),
				Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
				Fire: func(d schedule.Due) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, d)
				}})
			expect(t, e.Reload(base), Added)
			// robfig computes next times only once started, so compare
			// entry ids.
			before, _, ok := e.entry(base.ID)
			if !ok {
				t.Fatal("base schedule not armed")
			}

			o, changed := e.reload(mod, applyOne)
			switch {
			case timing[f.Name]:
				if !changed || (o != Replaced && o != Disarmed) {
					t.Fatalf("timing field %s changed: outcome %s, changed %v; want the timer re-armed", f.Name, o, changed)
				}
				if after, _, ok := e.entry(mod.ID); ok && after == before {
					t.Fatalf("timing field %s changed but the robfig entry %d was kept", f.Name, after)
				}
				return
			case f.Name == "ID":
				// Another id is another job: armed beside the first.
				if o != Added || !changed {
					t.Fatalf("new id: outcome %s, changed %v; want added, changed", o, changed)
				}
				return
			case f.Name == "UpdatedAt":
				if o != Unchanged || changed {
					t.Fatalf("updated_at changed: outcome %s, changed %v; want unchanged, not changed", o, changed)
				}
			default:
				if o != Unchanged || !changed {
					t.Fatalf("field %s changed: outcome %s, changed %v; want unchanged timer, changed job", f.Name, o, changed)
				}
			}
			if after, _, ok := e.entry(mod.ID); !ok || after != before {
				t.Fatalf("field %s changed the robfig entry: %d -> %d (armed %v)", f.Name, before, after, ok)
			}
			if st := mustGet(t, e, mod.ID); st.Schedule != mod {
				t.Fatalf("status holds %+v, want %+v", st.Schedule, mod)
			}
			mu.Lock()
			now = now.Add(time.Second)
			mu.Unlock()
			e.load(mod.ID).fire.Run()
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0].Schedule != mod || !got[0].Slot.Equal(now) {
				t.Fatalf("fire after changing %s: %+v, want one fire of %+v at %v", f.Name, got, mod, now)
			}
		})
	}
}

// changeValue sets v, field f of a schedule, to a value other than its
// current one, by kind.
func changeValue(t *testing.T, f reflect.StructField, v reflect.Value) {
	t.Helper()
	switch {
	case f.Type == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Hour)))
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "-changed")
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.CanInt():
		v.SetInt(v.Int() + 1)
	case v.CanUint():
		v.SetUint(v.Uint() + 1)
	case v.CanFloat():
		v.SetFloat(v.Float() + 1)
	default:
		t.Fatalf("field %s of type %s: tell changeValue how to change it", f.Name, f.Type)
	}
}

// The log's next_run is the job's next activation in the job's own zone,
// RFC 3339, as the CLI shows it; a job without a zone is shown in the
// engine's default zone.
func TestLogShowsNextRunInTheJobsZone(t *testing.T) {
	var buf syncBuffer
	now := time.Date(2030, 1, 1, 0, 30, 0, 0, time.UTC)
	berlin, err := schedule.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Location: berlin,
		Now: func() time.Time { return now }})
	seoul := sch("seoul", "0 9 * * *")
	seoul.Timezone = "Asia/Seoul"
	expect(t, e.Reload(seoul), Added)
	expect(t, e.Reload(sch("plain", "0 9 * * *")), Added)

	// 00:30 UTC is 09:30 in Seoul, so Seoul's next 9:00 is tomorrow's.
	want := map[string]string{
		"seoul": "2030-01-02T09:00:00+09:00",
		"plain": "2030-01-01T09:00:00+01:00",
	}
	for id, loc := range map[string]*time.Location{"seoul": mustZone(t, "Asia/Seoul"), "plain": berlin} {
		// What the CLI shows: the next activation in the job's zone.
		if st := mustGet(t, e, id); st.NextRun.In(loc).Format(time.RFC3339) != want[id] {
			t.Fatalf("%s: next run %s, want %s", id, st.NextRun.In(loc).Format(time.RFC3339), want[id])
		}
	}
	got := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(buf.String()))
	for dec.More() {
		var rec struct {
			Msg     string `json:"msg"`
			JobID   string `json:"job_id"`
			NextRun string `json:"next_run"`
		}
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec.Msg == "scheduler: schedule applied" {
			got[rec.JobID] = rec.NextRun
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("logged next_run %v, want %v", got, want)
	}
	if !strings.HasSuffix(got["seoul"], "+09:00") || !strings.HasSuffix(got["plain"], "+01:00") {
		t.Fatalf("next_run not in the job's zone: %v", got)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := schedule.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// syncBuffer is a bytes.Buffer safe for the engine's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
