package changestream

import (
	"fmt"
	"iter"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/resumetoken"
)

// Mode says how the watcher learns of edits.
type Mode string

// Watch modes.
const (
	// ModeAuto uses a change stream and falls back to polling when the
	// server has none (a standalone mongod). It is the default.
	ModeAuto Mode = "auto"
	// ModeChangeStream uses a change stream and keeps reconnecting when the
	// server refuses one.
	ModeChangeStream Mode = "changestream"
	// ModePoll reads the whole collection every poll interval.
	ModePoll Mode = "poll"
)

// ParseMode returns the mode named s; the empty string is ModeAuto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeChangeStream, ModePoll:
		return m, nil
	}
	return "", fmt.Errorf("unknown watch mode %q: want %s, %s or %s", s, ModeAuto, ModeChangeStream, ModePoll)
}

// Defaults of Options, applied by New to every zero field. The save timings
// depend on what a save writes: without Options.State a save is one small
// token document; with it, each save rewrites the whole state file, so saves
// are spaced further apart.
const (
	// DefaultPollInterval is the full-diff period in poll mode.
	DefaultPollInterval = 5 * time.Second
	// DefaultResyncInterval is the period of the safety-net full diff while
	// streaming.
	DefaultResyncInterval = 10 * time.Minute
	// DefaultBackoffMin is the first reconnect delay.
	DefaultBackoffMin = 100 * time.Millisecond
	// DefaultBackoffMax caps the reconnect delay.
	DefaultBackoffMax = 10 * time.Second
	// DefaultSaveMaxEvents is how many applied events may wait for a save.
	DefaultSaveMaxEvents = 1000
	// DefaultSaveDelay is how long an applied event's token may wait for a
	// save without Options.State.
	DefaultSaveDelay = 100 * time.Millisecond
	// DefaultIdleSaveInterval is the least time between two saves of an
	// idle stream's advancing token without Options.State: 2 writes per
	// idle minute, and a stored token at most this plus one getMore wait
	// (DefaultMaxAwait) old while idle — a restart then replays at most
	// that much of an idle oplog, and the token age stays below a minute.
	// Edits are saved after SaveDelay whatever this is.
	DefaultIdleSaveInterval = 30 * time.Second
	// DefaultStateSaveDelay is DefaultSaveDelay with Options.State.
	DefaultStateSaveDelay = time.Second
	// DefaultStateIdleSaveInterval is DefaultIdleSaveInterval with
	// Options.State.
	DefaultStateIdleSaveInterval = time.Minute
	// DefaultMaxAwait is the getMore wait the daemon gives MongoFeed: an
	// idle stream sends 6 getMores a minute instead of 60 at the server's
	// 1 s. An event ends a waiting getMore at once, and cancelling the
	// watcher's context abandons it at once, so neither an edit nor a
	// shutdown waits for it; a requested resync, which runs between round
	// trips, may.
	DefaultMaxAwait = 10 * time.Second
)

// ResyncOff as Options.ResyncInterval disables the periodic resync.
const ResyncOff time.Duration = -1

// Options configures a Watcher. Zero durations and counts take the
// defaults above.
type Options struct {
	// ID names this watcher's resume token (the instance id).
	ID string
	// Feed is the collection and its change stream.
	Feed Feed
	// Tokens stores the resume token.
	Tokens resumetoken.Store
	// Sink receives the collection's contents.
	Sink Sink
	// Logger receives the watcher's logs (default slog.Default()).
	Logger *slog.Logger
	// Mode is ModeAuto (default), ModeChangeStream or ModePoll.
	Mode Mode
	// PollInterval is the full-diff period in poll mode (default
	// DefaultPollInterval).
	PollInterval time.Duration
	// ResyncInterval is the period of the safety-net full diff while
	// streaming (default DefaultResyncInterval); negative (ResyncOff)
	// disables it.
	ResyncInterval time.Duration
	// BackoffMin and BackoffMax bound the reconnect backoff (defaults
	// DefaultBackoffMin and DefaultBackoffMax; a BackoffMax below
	// BackoffMin becomes the larger of the two and DefaultBackoffMax).
	BackoffMin, BackoffMax time.Duration
	// SaveDelay bounds how long an applied event's token may wait before it
	// is saved (default DefaultSaveDelay, or DefaultStateSaveDelay with
	// State). Negative saves synchronously after each event; with State,
	// where that would rewrite the whole state per event, negative means
	// the default. Saves are also spaced by their own cost: after a save
	// that took d, the next waits until 10·d have passed, so a large state
	// (a million documents, about a second to write) is written every ten
	// seconds or so while edits come, and the stored token trails by as
	// much (a restart replays those events, harmlessly).
	SaveDelay time.Duration
	// IdleSaveInterval is the least time between two saves of an idle
	// stream's advancing token (default DefaultIdleSaveInterval, or
	// DefaultStateIdleSaveInterval with State).
	IdleSaveInterval time.Duration
	// SaveMaxEvents saves at once when this many applied events are not yet
	// saved (default DefaultSaveMaxEvents).
	SaveMaxEvents int
	// State, when set with StateDocs, persists the applied documents with
	// their token for warm restarts (see the package doc).
	State StateStore
	// StateDocs lists the documents the sink has applied, for State's
	// saves: each document once, valid only until the next one. It is
	// called from the saver's goroutine while the sink's methods run, and
	// must list the effect of every event applied before the call (later
	// ones may show too: a state at least as new as its token is replayed
	// harmlessly). The watcher keeps no copy of the documents itself (the
	// daemon lists the copy its edit history keeps). Without StateDocs,
	// State is not used.
	StateDocs func() iter.Seq[bson.Raw]
	// Hooks lets a caller observe the watcher (metrics); any may be nil.
	Hooks Hooks
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = DefaultBackoffMin
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(DefaultBackoffMax, o.BackoffMin)
	}
	return o
}

// timing returns the save timing of o over the persister's defaults def.
func (o Options) timing(def saveTiming) saveTiming {
	t := saveTiming{delay: o.SaveDelay, idle: o.IdleSaveInterval, maxEvents: o.SaveMaxEvents}
	if t.delay == 0 || (t.delay < 0 && !def.syncOK) {
		t.delay = def.delay
	}
	if t.idle <= 0 {
		t.idle = def.idle
	}
	if t.maxEvents <= 0 {
		t.maxEvents = DefaultSaveMaxEvents
	}
	return t
}
