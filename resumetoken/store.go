// Package resumetoken stores change-stream resume tokens durably, one per
// watcher (daemon instance), so a restarted daemon resumes where it stopped.
//
// A token is saved only after the events before it have been applied
// (at-least-once): replaying an already applied event is harmless because
// reloads are idempotent, skipping one would lose an edit.
package resumetoken

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// CollectionName is the default collection of the MongoDB store.
const CollectionName = "resume_tokens"

// ErrNotFound is returned by Load when no token is stored for the watcher.
var ErrNotFound = errors.New("no resume token stored")

// ErrMalformed is wrapped by Load when the stored document is not a usable
// token (wrong type, missing field). The caller should drop it and start over.
var ErrMalformed = errors.New("malformed resume token document")

// Token is a stored resume position.
type Token struct {
	// Value is the resume token document as the server gave it.
	Value bson.Raw
	// SavedAt is when it was stored; zero if unknown.
	SavedAt time.Time
}

// Store keeps one resume token per watcher id.
type Store interface {
	// Load returns the stored token, ErrNotFound, or an error wrapping
	// ErrMalformed for a document that holds no usable token.
	Load(ctx context.Context, watcherID string) (Token, error)
	// Save replaces the stored token.
	Save(ctx context.Context, watcherID string, token bson.Raw) error
	// Delete forgets the token; deleting a missing token is not an error.
	Delete(ctx context.Context, watcherID string) error
}

// MongoStore keeps tokens in a MongoDB collection as
// {_id: <watcher id>, token: <document>, updated_at: <date>}.
type MongoStore struct {
	coll *mongo.Collection
	now  func() time.Time
}

// NewMongoStore returns a store over coll (normally <db>.resume_tokens).
func NewMongoStore(coll *mongo.Collection) *MongoStore {
	return &MongoStore{coll: coll, now: time.Now}
}

type tokenDoc struct {
	ID        string    `bson:"_id"`
	Token     bson.Raw  `bson:"token"`
	UpdatedAt time.Time `bson:"updated_at"`
}

// Load implements Store.
func (s *MongoStore) Load(ctx context.Context, watcherID string) (Token, error) {
	raw, err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: watcherID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("load resume token %q from %s: %w", watcherID, s.coll.Name(), err)
	}
	return parse(raw, watcherID)
}

func parse(raw bson.Raw, watcherID string) (Token, error) {
	var t Token
	if v, err := raw.LookupErr("updated_at"); err == nil && v.Type == bson.TypeDateTime {
		t.SavedAt = v.Time()
	}
	v, err := raw.LookupErr("token")
	if err != nil {
		return t, fmt.Errorf("resume token %q: no token field: %w", watcherID, ErrMalformed)
	}
	if v.Type != bson.TypeEmbeddedDocument {
		return t, fmt.Errorf("resume token %q: token is %s, not a document: %w", watcherID, v.Type, ErrMalformed)
	}
	t.Value = v.Document()
	if len(t.Value) <= 5 {
		return t, fmt.Errorf("resume token %q: token is an empty document: %w", watcherID, ErrMalformed)
	}
	return t, nil
}

// Save implements Store.
func (s *MongoStore) Save(ctx context.Context, watcherID string, token bson.Raw) error {
	// Refuse what Load would call malformed: it would only cost a full reload later.
	if len(token) <= 5 {
		return fmt.Errorf("save resume token %q: empty token", watcherID)
	}
	if err := token.Validate(); err != nil {
		return fmt.Errorf("save resume token %q: not a BSON document: %w", watcherID, err)
	}
	_, err := s.coll.ReplaceOne(ctx,
		bson.D{{Key: "_id", Value: watcherID}},
		tokenDoc{ID: watcherID, Token: token, UpdatedAt: s.now().UTC()},
		options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("save resume token %q to %s: %w", watcherID, s.coll.Name(), err)
	}
	return nil
}

// Delete implements Store.
func (s *MongoStore) Delete(ctx context.Context, watcherID string) error {
	if _, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: watcherID}}); err != nil {
		return fmt.Errorf("delete resume token %q from %s: %w", watcherID, s.coll.Name(), err)
	}
	return nil
}

// MemStore is an in-memory Store for tests and for running without
// durability. It is safe for concurrent use.
type MemStore struct {
	mu     sync.Mutex
	tokens map[string]Token
	// Saves counts successful Save calls.
	saves int
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore { return &MemStore{tokens: map[string]Token{}} }

// Load implements Store.
func (m *MemStore) Load(_ context.Context, watcherID string) (Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[watcherID]
	if !ok {
		return Token{}, ErrNotFound
	}
	return t, nil
}

// Save implements Store.
func (m *MemStore) Save(_ context.Context, watcherID string, token bson.Raw) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[watcherID] = Token{Value: append(bson.Raw(nil), token...), SavedAt: time.Now()}
	m.saves++
	return nil
}

// Delete implements Store.
func (m *MemStore) Delete(_ context.Context, watcherID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tokens, watcherID)
	return nil
}

// Saves returns how many times Save succeeded.
func (m *MemStore) Saves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}
