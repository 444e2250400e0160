package changestream

import (
	"strings"
	"testing"
	"time"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "changestream": ModeChangeStream, "poll": ModePoll} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"push", "Poll", " auto"} {
		_, err := ParseMode(in)
		if err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseMode(%q): err = %v, want one naming the value", in, err)
		}
	}
}

// The save timings default by what a save writes; explicit values win.
func TestSaveTimingDefaultsDependOnThePersister(t *testing.T) {
	tokenOnly := (&tokenPersister{}).defaults()
	withState := (&statePersister{}).defaults()
	cases := []struct {
		name string
		o    Options
		def  saveTiming
		want saveTiming
	}{
		{"token, zero", Options{}, tokenOnly, saveTiming{DefaultSaveDelay, DefaultIdleSaveInterval, DefaultSaveMaxEvents, false}},
		{"state, zero", Options{}, withState, saveTiming{DefaultStateSaveDelay, DefaultStateIdleSaveInterval, DefaultSaveMaxEvents, false}},
		{"token, sync", Options{SaveDelay: -1}, tokenOnly, saveTiming{-1, DefaultIdleSaveInterval, DefaultSaveMaxEvents, false}},
		{"state, sync refused", Options{SaveDelay: -1}, withState, saveTiming{DefaultStateSaveDelay, DefaultStateIdleSaveInterval, DefaultSaveMaxEvents, false}},
		{"state, explicit", Options{SaveDelay: time.Millisecond, IdleSaveInterval: time.Hour, SaveMaxEvents: 7}, withState,
			saveTiming{time.Millisecond, time.Hour, 7, false}},
	}
	for _, c := range cases {
		if got := c.o.timing(c.def); got != c.want {
			t.Errorf("%s: timing = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestNewFillsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Mode != ModeAuto || o.PollInterval != DefaultPollInterval || o.ResyncInterval != DefaultResyncInterval ||
		o.BackoffMin != DefaultBackoffMin || o.BackoffMax != DefaultBackoffMax || o.Logger == nil {
		t.Errorf("defaults = %+v", o)
	}
	if o := (Options{ResyncInterval: -1}).withDefaults(); o.ResyncInterval >= 0 {
		t.Errorf("a negative resync interval (off) became %v", o.ResyncInterval)
	}
	if o := (Options{BackoffMin: time.Minute}).withDefaults(); o.BackoffMax != time.Minute {
		t.Errorf("BackoffMax below BackoffMin became %v, want BackoffMin", o.BackoffMax)
	}
}

func TestRunRefusesAnUnknownMode(t *testing.T) {
	w := New(Options{Mode: "push", Feed: newFakeFeed(), Sink: newMemSink()})
	err := w.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "push") {
		t.Fatalf("Run with mode push: err = %v, want one naming the mode", err)
	}
}
