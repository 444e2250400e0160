package changestream

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// position is the one owner of the stream's resume position: the token the
// stream resumes after, and whether the sink is in step with it. Every
// change of either goes through its methods:
//
//   - resumed: a token was read from the store at startup (the sink is still
//     empty, so a full reload is due unless armed from the state file);
//   - warm: the sink was armed from a state file at that token;
//   - advance: an event was applied, or an empty batch moved the position;
//   - lose: the position is gone (see the loss values); the stored token is
//     deleted, the stream opens at the current position, and a full reload
//     with the loss's reason is due;
//   - reloaded: a full reload made the sink equal to the collection at the
//     freshly opened stream's position, which is stored at once in the
//     background.
//
// It is used from the stream goroutine only; the saver it feeds saves in
// the background.
type position struct {
	saver *saver
	log   *slog.Logger
	id    string

	token   bson.Raw  // resume after this; nil: open at the current position
	savedAt time.Time // when token was stored, if it came from the store
	// reload is the reason of the full reload due before the sink is in
	// step with the stream again; "" when it is in step.
	reload string
}

func newPosition(s *saver, log *slog.Logger, id string) *position {
	return &position{saver: s, log: log, id: id, reload: ReasonStartup}
}

// loss is one way of losing the position: the reload reason it leads to and
// what is logged.
type loss struct {
	reason string
	msg    string
}

// The ways the position is lost.
var (
	// lossMalformed: the stored token document holds no usable token. The
	// sink is empty anyway, so the reload keeps the startup reason.
	lossMalformed = loss{ReasonStartup, "stored resume token is malformed; dropping it and doing a full reload"}
	// lossRefused: the server refused to resume after the stored token
	// (history rolled off the oplog, or a token from elsewhere).
	lossRefused = loss{ReasonTokenRefused, "server refused the stored resume token; dropping it, opening at the current position and reloading everything"}
	// lossHistory: the open stream failed with a lost-position error
	// (ChangeStreamHistoryLost 286, ChangeStreamFatalError 280,
	// InvalidResumeToken 260, CappedPositionLost 136, or a
	// NonResumableChangeStreamError label).
	lossHistory = loss{ReasonLostPosition, "change stream lost its resume position; reloading everything"}
	// lossInvalidated: the collection was dropped or renamed, or the stream
	// was invalidated; its token cannot be resumed after.
	lossInvalidated = loss{ReasonInvalidate, "schedules collection was dropped, renamed or the stream invalidated; reloading everything"}
	// lossClosed: the server closed the cursor without an error.
	lossClosed = loss{ReasonInvalidate, "server closed the change stream; reloading everything"}
)

// resumed records the token read from the store at startup.
func (p *position) resumed(token bson.Raw, savedAt time.Time) {
	p.token, p.savedAt = token, savedAt
}

// warm records that the sink was armed from a state file at p.token: no
// full reload is due.
func (p *position) warm() { p.reload = "" }

// lose forgets the position for the reason l (logged with attrs) and
// deletes the stored token: the stream opens at the current position next,
// and a full reload is due. A reload already due for a reason other than
// startup keeps its reason; one due at startup takes l's.
func (p *position) lose(ctx context.Context, l loss, attrs ...any) {
	p.log.Warn(l.msg, append([]any{"watcher_id", p.id}, attrs...)...)
	p.token, p.savedAt = nil, time.Time{}
	p.saver.drop(ctx)
	if p.reload == "" || p.reload == ReasonStartup {
		p.reload = l.reason
	}
}

// reloaded records that a full reload made the sink equal to the
// collection, with the stream open at t: the saver stores t at once, so a
// restart resumes from here even if no edit comes, but in the background:
// the stream is ready without waiting for the write (with a state file the
// whole collection's, about a second at a million schedules). Until it is
// written a restart starts from what was stored before (nothing on a first
// start: a full reload again).
func (p *position) reloaded(ctx context.Context, t bson.Raw) {
	p.reload = ""
	if t == nil {
		return
	}
	p.token, p.savedAt = t, time.Time{}
	p.saver.soon(ctx, t)
}

// advance moves the position to t: after an applied event (applied true,
// saved within the save delay) or an empty batch (saved at the idle
// interval). An unchanged t is no move.
func (p *position) advance(ctx context.Context, t bson.Raw, applied bool) {
	if applied {
		p.token, p.savedAt = t, time.Time{}
		p.saver.applied(ctx, t)
		return
	}
	if t == nil || bytesEqual(t, p.token) {
		return
	}
	p.token, p.savedAt = t, time.Time{}
	p.saver.advanced(t)
}

// age renders how old the stored token is, for logs.
func (p *position) age() string {
	if p.savedAt.IsZero() {
		return "unknown"
	}
	return time.Since(p.savedAt).Round(time.Millisecond).String()
}
