package changestream

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// State is the collection as the sink has applied it, with the resume token
// it corresponds to: arming from Docs and resuming the stream after Token
// reproduces the sink's state without reading the collection.
type State struct {
	// Token is the resume position Docs are at.
	Token bson.Raw
	// Docs are the collection's documents as applied.
	Docs []bson.Raw
}

// StateStore persists State for warm restarts (see Options.State).
type StateStore interface {
	// Load returns the stored state; any error means "do a full reload"
	// (an error wrapping fs.ErrNotExist: there is none yet).
	Load(ctx context.Context) (State, error)
	// Save replaces the stored state atomically.
	Save(ctx context.Context, st State) error
}

// statePersister saves the state and then the token. The state is saved
// first so that the stored token never names a position the state file has
// not reached: a crash between the two leaves them unequal, which only
// costs a full reload on the next start.
type statePersister struct {
	tokens *tokenPersister
	store  StateStore
	docs   *mirror
	id     string
	log    *slog.Logger
}

func (p *statePersister) save(ctx context.Context, t bson.Raw) bool {
	start := time.Now()
	docs := p.docs.snapshot() // taken after t was applied: at least as new as t
	if err := p.store.Save(ctx, State{Token: t, Docs: docs}); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("saving state file failed; the next start will reload everything unless a later save works",
				"watcher_id", p.id, "error", err)
		}
	} else {
		p.log.Debug("state file saved", "documents", len(docs), "duration", time.Since(start))
	}
	return p.tokens.save(ctx, t)
}

func (p *statePersister) forget(ctx context.Context) { p.tokens.forget(ctx) }

func (p *statePersister) defaults() saveTiming {
	return saveTiming{delay: DefaultStateSaveDelay, idle: DefaultStateIdleSaveInterval}
}

// warmStart arms the sink from the stored state when it is at token, and
// reports whether it did.
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
	read := time.Since(start)
	applyStart := time.Now()
	changed := w.sink.ReplaceAll(st.Docs)
	apply := time.Since(applyStart)
	w.markSynced()
	w.log.Info("armed from state file", "watcher_id", w.opts.ID, "documents", len(st.Docs),
		"changed", len(changed), "duration", time.Since(start), "read", read, "apply", apply)
	return true
}

// mirror is a sink wrapper that remembers the documents it applied, for
// the state file. Snapshots may run concurrently with the stream loop.
type mirror struct {
	Sink
	mu   sync.Mutex
	docs map[string]bson.Raw // by _id (type byte + value bytes)
}

func newMirror(s Sink) *mirror { return &mirror{Sink: s, docs: map[string]bson.Raw{}} }

func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

func (m *mirror) Upsert(doc bson.Raw) {
	m.Sink.Upsert(doc)
	if id, err := doc.LookupErr("_id"); err == nil {
		d := append(bson.Raw(nil), doc...) // the stream reuses its buffers
		m.mu.Lock()
		m.docs[idKey(id)] = d
		m.mu.Unlock()
	}
}

func (m *mirror) Delete(id bson.RawValue) {
	m.Sink.Delete(id)
	m.mu.Lock()
	delete(m.docs, idKey(id))
	m.mu.Unlock()
}

func (m *mirror) ReplaceAll(docs []bson.Raw) []string {
	changed := m.Sink.ReplaceAll(docs)
	next := make(map[string]bson.Raw, len(docs))
	for _, d := range docs {
		if id, err := d.LookupErr("_id"); err == nil {
			next[idKey(id)] = d
		}
	}
	m.mu.Lock()
	m.docs = next
	m.mu.Unlock()
	return changed
}

func (m *mirror) snapshot() []bson.Raw {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]bson.Raw, 0, len(m.docs))
	for _, d := range m.docs {
		out = append(out, d)
	}
	return out
}
