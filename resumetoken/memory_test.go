package resumetoken

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMemoryStoreKeepsACopyAndForgets(t *testing.T) {
	ctx := context.Background()
	m := NewMemoryStore()
	if _, err := m.Load(ctx, "w"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of an empty store: %v, want ErrNotFound", err)
	}
	tok, err := bson.Marshal(bson.D{{Key: "_data", Value: "82AB"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(ctx, "w", tok); err != nil {
		t.Fatal(err)
	}
	tok[len(tok)-3] = 'X' // the caller reuses its buffer
	got, err := m.Load(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Value.Lookup("_data").StringValueOK(); v != "82AB" || got.SavedAt.IsZero() {
		t.Fatalf("Load = %v (saved %v), want the saved copy", got.Value, got.SavedAt)
	}
	if err := m.Delete(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Load(ctx, "w"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load after Delete: %v, want ErrNotFound", err)
	}
}
