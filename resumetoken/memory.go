package resumetoken

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MemoryStore is a Store that keeps tokens in memory only: for a watcher
// whose consumer reads its whole collection at every start anyway (the
// blackout windows, the pending run-now requests), where a stored token
// would buy nothing and cost writes every idle minute. Within one process
// the token still lets the stream resume after a reconnect without a full
// reload.
type MemoryStore struct {
	mu     sync.Mutex
	tokens map[string]Token
}

// NewMemoryStore returns an empty in-memory token store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{tokens: map[string]Token{}}
}

// Load implements Store.
func (m *MemoryStore) Load(_ context.Context, id string) (Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[id]
	if !ok {
		return Token{}, ErrNotFound
	}
	return t, nil
}

// Save implements Store.
func (m *MemoryStore) Save(_ context.Context, id string, token bson.Raw) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[id] = Token{Value: append(bson.Raw(nil), token...), SavedAt: time.Now()}
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tokens, id)
	return nil
}
