package resumetoken_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/resumetoken"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

var (
	_ resumetoken.Store = (*resumetoken.MongoStore)(nil)
	_ resumetoken.Store = (*resumetoken.MemStore)(nil)
)

// tok builds a resume token document like the server's {_data: "..."}.
func tok(t testing.TB, data string) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "_data", Value: data}})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ---- behaviour common to both stores ----

func testStoreContract(t *testing.T, newStore func(t *testing.T) resumetoken.Store) {
	t.Run("LoadEmpty", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Load(ctxT(t), "w1")
		if !errors.Is(err, resumetoken.ErrNotFound) {
			t.Fatalf("Load on an empty store: err = %v, want ErrNotFound", err)
		}
		if errors.Is(err, resumetoken.ErrMalformed) {
			t.Errorf("ErrNotFound must not also be ErrMalformed")
		}
	})
	t.Run("SaveLoad", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		want := tok(t, "8263A1B2C3000000012B022C0100296E5A1004")
		before := time.Now()
		if err := s.Save(ctx, "w1", want); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		got, err := s.Load(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Value, want) {
			t.Errorf("Load = %v, want %v", got.Value, want)
		}
		// Stored dates have millisecond resolution.
		if got.SavedAt.Before(before.Add(-time.Millisecond)) || got.SavedAt.After(after.Add(time.Millisecond)) {
			t.Errorf("SavedAt = %v, want between %v and %v", got.SavedAt, before, after)
		}
	})
	t.Run("SaveReplaces", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		first, second := tok(t, "01"), tok(t, "02")
		if err := s.Save(ctx, "w1", first); err != nil {
			t.Fatal(err)
		}
		t1, err := s.Load(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, "w1", second); err != nil {
			t.Fatal(err)
		}
		t2, err := s.Load(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(t2.Value, second) {
			t.Errorf("after the second Save, Load = %v, want %v", t2.Value, second)
		}
		if t2.SavedAt.Before(t1.SavedAt) {
			t.Errorf("SavedAt went back: %v then %v", t1.SavedAt, t2.SavedAt)
		}
	})
	t.Run("WatchersAreSeparate", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		a, b := tok(t, "aa"), tok(t, "bb")
		if err := s.Save(ctx, "a", a); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, "b", b); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]bson.Raw{"a": a, "b": b} {
			got, err := s.Load(ctx, id)
			if err != nil || !bytes.Equal(got.Value, want) {
				t.Errorf("Load(%s) = %v, %v; want %v", id, got.Value, err, want)
			}
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, "b"); err != nil {
			t.Errorf("deleting a's token lost b's: %v", err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		if err := s.Save(ctx, "w1", tok(t, "01")); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, "w1"); !errors.Is(err, resumetoken.ErrNotFound) {
			t.Errorf("Load after Delete: err = %v, want ErrNotFound", err)
		}
		// Saving again after a delete works.
		if err := s.Save(ctx, "w1", tok(t, "03")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(ctx, "w1"); err != nil || !bytes.Equal(got.Value, tok(t, "03")) {
			t.Errorf("Load after re-Save = %v, %v", got.Value, err)
		}
	})
	t.Run("DeleteMissing", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		if err := s.Delete(ctx, "never-saved"); err != nil {
			t.Errorf("Delete of a missing token: %v", err)
		}
		if err := s.Delete(ctx, "never-saved"); err != nil {
			t.Errorf("second Delete of a missing token: %v", err)
		}
	})
	t.Run("SaveCopiesToken", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		buf := tok(t, "01")
		want := bytes.Clone(buf)
		if err := s.Save(ctx, "w1", buf); err != nil {
			t.Fatal(err)
		}
		copy(buf[len(buf)-3:], "zz") // the caller reuses its buffer
		got, err := s.Load(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Value, want) {
			t.Errorf("the stored token changed with the caller's buffer: %v, want %v", got.Value, want)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := newStore(t)
		ctx := ctxT(t)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("w%d", i%2)
				for j := range 5 {
					if err := s.Save(ctx, id, tok(t, fmt.Sprintf("%02d%02d", i, j))); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Load(ctx, id); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, id := range []string{"w0", "w1"} {
			got, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := got.Value.Validate(); err != nil {
				t.Errorf("Load(%s) after concurrent saves is not a valid document: %v", id, err)
			}
		}
	})
}

// ---- MemStore ----

func TestMemStore(t *testing.T) {
	testStoreContract(t, func(*testing.T) resumetoken.Store { return resumetoken.NewMemStore() })
}

func TestMemStoreSaves(t *testing.T) {
	m := resumetoken.NewMemStore()
	ctx := context.Background()
	if m.Saves() != 0 {
		t.Fatalf("Saves() = %d on a new store", m.Saves())
	}
	for i := range 3 {
		if err := m.Save(ctx, "w", tok(t, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	_ = m.Delete(ctx, "w")
	_, _ = m.Load(ctx, "w")
	if m.Saves() != 3 {
		t.Errorf("Saves() = %d, want 3 (Load and Delete do not count)", m.Saves())
	}
}

// ---- MongoStore against the test server ----

func newMongoStore(t *testing.T) (*resumetoken.MongoStore, *mongo.Collection) {
	t.Helper()
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(resumetoken.CollectionName)
	return resumetoken.NewMongoStore(coll), coll
}

func TestMongoStore(t *testing.T) {
	client := testmongo.Client(t)
	testStoreContract(t, func(t *testing.T) resumetoken.Store {
		return resumetoken.NewMongoStore(testmongo.NewDatabase(t, client).Collection(resumetoken.CollectionName))
	})
}

// TestMongoStoreDocument checks the documented shape
// {_id: <watcher id>, token: <document>, updated_at: <date>}.
func TestMongoStoreDocument(t *testing.T) {
	s, coll := newMongoStore(t)
	ctx := ctxT(t)
	token := tok(t, "8263A1B2C3")
	before := time.Now()
	if err := s.Save(ctx, "replica-1", token); err != nil {
		t.Fatal(err)
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "replica-1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	elems, err := raw.Elements()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range elems {
		names = append(names, e.Key())
	}
	if fmt.Sprint(names) != "[_id token updated_at]" {
		t.Errorf("stored fields = %v, want [_id token updated_at]", names)
	}
	if id := raw.Lookup("_id"); id.Type != bson.TypeString || id.StringValue() != "replica-1" {
		t.Errorf("_id = %v", id)
	}
	if v := raw.Lookup("token"); v.Type != bson.TypeEmbeddedDocument || !bytes.Equal(v.Document(), token) {
		t.Errorf("token = %v, want the document %v", v, token)
	}
	v := raw.Lookup("updated_at")
	if v.Type != bson.TypeDateTime {
		t.Fatalf("updated_at has type %v, want a date", v.Type)
	}
	if d := v.Time().Sub(before); d < -time.Second || d > time.Minute {
		t.Errorf("updated_at = %v, not close to now (%v)", v.Time(), before)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("documents = %d, %v; want 1", n, err)
	}
	// Saving again replaces, never adds.
	if err := s.Save(ctx, "replica-1", tok(t, "02")); err != nil {
		t.Fatal(err)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("after a second Save: documents = %d, %v; want 1", n, err)
	}
}

func TestMongoStoreMalformed(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	tests := []struct {
		name string
		doc  bson.D
	}{
		{"token is a string", bson.D{{Key: "token", Value: "8263A1B2C3"}, {Key: "updated_at", Value: now}}},
		{"token is a number", bson.D{{Key: "token", Value: 42}}},
		{"token is an array", bson.D{{Key: "token", Value: bson.A{"x"}}}},
		{"token is null", bson.D{{Key: "token", Value: nil}}},
		{"token is binary", bson.D{{Key: "token", Value: bson.Binary{Data: []byte{1, 2, 3}}}}},
		{"token missing", bson.D{{Key: "updated_at", Value: now}}},
		{"token is an empty document", bson.D{{Key: "token", Value: bson.D{}}, {Key: "updated_at", Value: now}}},
		{"empty document", bson.D{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, coll := newMongoStore(t)
			ctx := ctxT(t)
			doc := append(bson.D{{Key: "_id", Value: "w1"}}, tt.doc...)
			if _, err := coll.InsertOne(ctx, doc); err != nil {
				t.Fatal(err)
			}
			_, err := s.Load(ctx, "w1")
			if !errors.Is(err, resumetoken.ErrMalformed) {
				t.Fatalf("Load of %v: err = %v, want ErrMalformed", doc, err)
			}
			if errors.Is(err, resumetoken.ErrNotFound) {
				t.Errorf("a malformed token must not read as ErrNotFound")
			}
			// The way out: Delete, then Save a good one.
			if err := s.Delete(ctx, "w1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Save(ctx, "w1", tok(t, "01")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Load(ctx, "w1"); err != nil {
				t.Errorf("Load after replacing the malformed document: %v", err)
			}
		})
	}
}

// A malformed document is replaced by Save (upsert on _id), without a Delete.
func TestMongoStoreSaveOverMalformed(t *testing.T) {
	s, coll := newMongoStore(t)
	ctx := ctxT(t)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "w1"}, {Key: "token", Value: "junk"}, {Key: "extra", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	want := tok(t, "05")
	if err := s.Save(ctx, "w1", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "w1")
	if err != nil || !bytes.Equal(got.Value, want) {
		t.Fatalf("Load = %v, %v; want %v", got.Value, err, want)
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "w1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.LookupErr("extra"); err == nil {
		t.Errorf("Save kept a field of the old document: %v", raw)
	}
}

// A document without updated_at (or with a wrong type) still loads; SavedAt is zero.
func TestMongoStoreNoUpdatedAt(t *testing.T) {
	s, coll := newMongoStore(t)
	ctx := ctxT(t)
	token := tok(t, "07")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "w1"}, {Key: "token", Value: token}, {Key: "updated_at", Value: "yesterday"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Value, token) || !got.SavedAt.IsZero() {
		t.Errorf("Load = %v saved %v; want the token and a zero SavedAt", got.Value, got.SavedAt)
	}
}

func TestMongoStoreSaveRefusesBadTokens(t *testing.T) {
	s, coll := newMongoStore(t)
	ctx := ctxT(t)
	empty, err := bson.Marshal(bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]bson.Raw{
		"nil":            nil,
		"zero length":    {},
		"empty document": empty,
		"not BSON":       {1, 2, 3},
		"bad length":     {0x10, 0, 0, 0, 0},
	} {
		if err := s.Save(ctx, "w1", token); err == nil {
			t.Errorf("Save of a %s token succeeded", name)
		} else if !bytes.Contains([]byte(err.Error()), []byte("w1")) {
			t.Errorf("Save of a %s token: error %q does not name the watcher", name, err)
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
		t.Errorf("refused saves stored %d documents (%v)", n, err)
	}
	if _, err := s.Load(ctx, "w1"); !errors.Is(err, resumetoken.ErrNotFound) {
		t.Errorf("Load after refused saves: %v, want ErrNotFound", err)
	}
}

func TestMongoStoreCancelledContext(t *testing.T) {
	s, _ := newMongoStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Load(ctx, "w1"); err == nil || errors.Is(err, resumetoken.ErrNotFound) || errors.Is(err, resumetoken.ErrMalformed) {
		t.Errorf("Load with a cancelled context: err = %v, want a plain failure", err)
	}
	if err := s.Save(ctx, "w1", tok(t, "01")); err == nil {
		t.Error("Save with a cancelled context succeeded")
	}
	if err := s.Delete(ctx, "w1"); err == nil {
		t.Error("Delete with a cancelled context succeeded")
	}
}
