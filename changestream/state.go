package changestream

import (
	"context"
	"errors"
	"io/fs"
	"iter"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// State is the collection as the sink has applied it, with the resume token
// it corresponds to: arming from Docs and resuming the stream after Token
// reproduces the sink's state without reading the collection.
type State struct {
	// Token is the resume position Docs are at.
	Token bson.Raw
	// Docs are the collection's documents as applied, one at a time, as
	// Sink.ReplaceAll takes them: each valid only until the next, a
	// failure yielded last. They are read (from the sink's documents on a
	// save, from the store on a load) as they are ranged over, at most
	// once, so neither a save nor a load holds the whole collection.
	Docs iter.Seq2[bson.Raw, error]
	// Documents is how many documents Docs yields when the store knows it
	// before they are read (a state file's count), 0 when it does not: a
	// hint to size what keeps them, not a check (Docs itself fails on a
	// store that does not hold what it says).
	Documents int
}

// StateStore persists State for warm restarts (see Options.State).
type StateStore interface {
	// Load opens the stored state: its token, and its documents read as
	// State.Docs is ranged over. Any error means "do a full reload" (an
	// error wrapping fs.ErrNotExist: there is none yet); so does a failure
	// yielded by Docs.
	Load(ctx context.Context) (State, error)
	// Save replaces the stored state atomically, reading st.Docs once.
	Save(ctx context.Context, st State) error
}

// statePersister saves the state and then the token. The state is saved
// first so that the stored token never names a position the state file has
// not reached: a crash between the two leaves them unequal, which only
// costs a full reload on the next start.
type statePersister struct {
	tokens *tokenPersister
	store  StateStore
	docs   func() iter.Seq[bson.Raw] // Options.StateDocs
	id     string
	log    *slog.Logger
}

func (p *statePersister) save(ctx context.Context, t bson.Raw) bool {
	start := time.Now()
	n := 0
	// Listed after t was applied: at least as new as t.
	docs := func(yield func(bson.Raw, error) bool) {
		for d := range p.docs() {
			n++
			if !yield(d, nil) {
				return
			}
		}
	}
	if err := p.store.Save(ctx, State{Token: t, Docs: docs}); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("saving state file failed; the next start will reload everything unless a later save works",
				"watcher_id", p.id, "error", err)
		}
	} else {
		p.log.Debug("state file saved", "documents", n, "duration", time.Since(start))
	}
	return p.tokens.save(ctx, t)
}

func (p *statePersister) forget(ctx context.Context) { p.tokens.forget(ctx) }

func (p *statePersister) defaults() saveTiming {
	return saveTiming{delay: DefaultStateSaveDelay, idle: DefaultStateIdleSaveInterval}
}

// warmStart arms the sink from the stored state when it is at token, and
// reports whether it did. A state that fails part-way (a file damaged
// after its check) leaves what it armed to the full reload that follows.
func (w *Watcher) warmStart(ctx context.Context, token bson.Raw) bool {
	if w.opts.State == nil || token == nil {
		return false
	}
	start := time.Now()
	st, err := w.opts.State.Load(ctx)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			w.log.Info("no state file yet; doing a full reload", "watcher_id", w.opts.ID)
		} else {
			w.log.Warn("state file unusable; doing a full reload", "watcher_id", w.opts.ID, "error", err)
		}
		return false
	}
	if !bytesEqual(st.Token, token) {
		w.log.Info("state file is not at the stored resume position (token reset, or stopped between the two saves); doing a full reload",
			"watcher_id", w.opts.ID, "state_token", tokenString(st.Token), "stored_token", tokenString(token))
		return false
	}
	opened := time.Since(start)
	r := w.beginRead(ReasonStateFile, start)
	changed, err := w.sink.ReplaceAll(r.count(st.Docs))
	w.endRead()
	if err != nil {
		w.log.Warn("state file unusable; doing a full reload", "watcher_id", w.opts.ID, "error", err,
			"documents", r.docs)
		return false
	}
	w.markSynced()
	w.log.Info("armed from state file", "watcher_id", w.opts.ID, "documents", r.docs,
		"changed", len(changed), "duration", time.Since(start), "open", opened, "read", r.readWait, "apply", r.apply)
	return true
}
