package testmongo_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// refusedWrite is one kind of write the server refuses, in whole or in part. A real server records in its oplog,
// and so shows to change streams, exactly the writes it committed: the parts of a partly refused write that were
// applied (an unordered insertMany's other documents, the documents a multi-update changed before it failed), and
// nothing of what it refused.
type refusedWrite struct {
	name string
	// seed is inserted before the stream opens.
	seed []bson.D
	// index, when set, is created (unique) before the stream opens.
	index bson.D
	// write makes the refused write and returns its error.
	write func(ctx context.Context, coll *mongo.Collection) error
	// refused tells whether the write was refused as it should be; nil: it must succeed (a write that matches
	// nothing is not refused, it only changes nothing).
	refused func(error) bool
	// committed are the events ("op id") the write must produce, before the sentinel's insert.
	committed []string
	// anyOrder: the driver may send the parts of an unordered bulk write in any order.
	anyOrder bool
	// after is the collection's content afterwards, "id" or "id=value of field v", sorted by _id.
	after []string
}

func doc(id string, fields ...any) bson.D {
	d := bson.D{{Key: "_id", Value: id}}
	for i := 0; i+1 < len(fields); i += 2 {
		d = append(d, bson.E{Key: fields[i].(string), Value: fields[i+1]})
	}
	return d
}

func set(fields ...any) bson.D {
	return bson.D{{Key: "$set", Value: doc("", fields...)[1:]}}
}

func refusedWrites() []refusedWrite {
	duplicate := mongo.IsDuplicateKeyError
	code := func(codes ...int) func(error) bool {
		return func(err error) bool {
			var se mongo.ServerError
			if !errors.As(err, &se) {
				return false
			}
			for _, c := range codes {
				if se.HasErrorCode(c) {
					return true
				}
			}
			return false
		}
	}
	return []refusedWrite{{
		name: "insertOne of an existing _id",
		seed: []bson.D{doc("nightly_ping", "v", "0 2 * * *")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.InsertOne(c, doc("nightly_ping", "v", "0 3 * * *"))
			return err
		},
		refused: duplicate,
		after:   []string{"nightly_ping=0 2 * * *"},
	}, {
		name: "ordered insertMany stops at a duplicate",
		seed: []bson.D{doc("a", "v", "old")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.InsertMany(c, []any{doc("n1"), doc("a", "v", "new"), doc("n2")})
			return err
		},
		refused:   duplicate,
		committed: []string{"insert n1"},
		after:     []string{"a=old", "n1"},
	}, {
		name: "unordered insertMany commits all but the duplicate",
		seed: []bson.D{doc("a", "v", "old")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.InsertMany(c, []any{doc("n1"), doc("a", "v", "new"), doc("n2")},
				options.InsertMany().SetOrdered(false))
			return err
		},
		refused:   duplicate,
		committed: []string{"insert n1", "insert n2"},
		after:     []string{"a=old", "n1", "n2"},
	}, {
		name: "unordered insertMany with an invalid document (array _id)",
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.InsertMany(c, []any{doc("n1"), bson.D{{Key: "_id", Value: bson.A{1, 2}}}, doc("n2")},
				options.InsertMany().SetOrdered(false))
			return err
		},
		refused:   code(2, 53), // BadValue, InvalidIdField
		committed: []string{"insert n1", "insert n2"},
		after:     []string{"n1", "n2"},
	}, {
		name: "unordered bulkWrite: a duplicate insert beside committed writes",
		seed: []bson.D{doc("a", "v", "old"), doc("b", "v", "old")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.BulkWrite(c, []mongo.WriteModel{
				mongo.NewInsertOneModel().SetDocument(doc("a", "v", "new")),
				mongo.NewInsertOneModel().SetDocument(doc("n1")),
				mongo.NewUpdateOneModel().SetFilter(doc("b")).SetUpdate(set("v", "new")),
				mongo.NewDeleteOneModel().SetFilter(doc("nosuch")),
			}, options.BulkWrite().SetOrdered(false))
			return err
		},
		refused:   duplicate,
		committed: []string{"insert n1", "update b"},
		anyOrder:  true,
		after:     []string{"a=old", "b=new", "n1"},
	}, {
		name:  "updateOne onto a unique key taken",
		seed:  []bson.D{doc("a", "name", "x", "v", "a"), doc("b", "name", "y", "v", "b")},
		index: bson.D{{Key: "name", Value: 1}},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.UpdateOne(c, doc("b"), set("name", "x", "v", "changed"))
			return err
		},
		refused: duplicate,
		after:   []string{"a=a", "b=b"},
	}, {
		name:  "updateMany stops at a unique key taken, keeping what it changed",
		seed:  []bson.D{doc("a", "name", "x", "v", "a"), doc("b", "name", "y", "v", "b")},
		index: bson.D{{Key: "name", Value: 1}},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.UpdateMany(c, bson.D{}, set("name", "z", "v", "changed"))
			return err
		},
		refused:   duplicate,
		committed: []string{"update a"},
		after:     []string{"a=changed", "b=b"},
	}, {
		name: "upsert whose new document has an existing _id",
		seed: []bson.D{doc("a", "v", "old", "enabled", false)},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.UpdateOne(c, doc("a", "enabled", true), set("v", "new"), options.UpdateOne().SetUpsert(true))
			return err
		},
		refused: duplicate,
		after:   []string{"a=old"},
	}, {
		name: "findOneAndUpdate upsert whose new document has an existing _id",
		seed: []bson.D{doc("a", "v", "old", "enabled", false)},
		write: func(c context.Context, coll *mongo.Collection) error {
			return coll.FindOneAndUpdate(c, doc("a", "enabled", true), set("v", "new"),
				options.FindOneAndUpdate().SetUpsert(true)).Err()
		},
		refused: duplicate,
		after:   []string{"a=old"},
	}, {
		name: "updateOne $inc of a string",
		seed: []bson.D{doc("a", "v", "old", "n", "text")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.UpdateOne(c, doc("a"), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "new"}}},
				{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
			return err
		},
		refused: code(14), // TypeMismatch
		after:   []string{"a=old"},
	}, {
		name: "updateMany $inc stops at a string, keeping what it changed",
		seed: []bson.D{doc("a", "v", "a", "n", 1), doc("b", "v", "b", "n", "text"), doc("c", "v", "c", "n", 2)},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.UpdateMany(c, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "changed"}}},
				{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
			return err
		},
		refused:   code(14),
		committed: []string{"update a"},
		after:     []string{"a=changed", "b=b", "c=c"},
	}, {
		name: "findOneAndUpdate $inc of a string",
		seed: []bson.D{doc("a", "v", "old", "n", "text")},
		write: func(c context.Context, coll *mongo.Collection) error {
			return coll.FindOneAndUpdate(c, doc("a"), bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "new"}}},
				{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}).Err()
		},
		refused: code(14),
		after:   []string{"a=old"},
	}, {
		name: "replaceOne changing _id",
		seed: []bson.D{doc("a", "v", "old")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.ReplaceOne(c, doc("a"), doc("other", "v", "new"))
			return err
		},
		refused: code(66), // ImmutableField
		after:   []string{"a=old"},
	}, {
		name: "ordered bulkWrite stops at a failed update",
		seed: []bson.D{doc("a", "v", "a"), doc("b", "v", "b", "n", "text"), doc("c", "v", "c")},
		write: func(c context.Context, coll *mongo.Collection) error {
			_, err := coll.BulkWrite(c, []mongo.WriteModel{
				mongo.NewUpdateOneModel().SetFilter(doc("a")).SetUpdate(set("v", "changed")),
				mongo.NewUpdateOneModel().SetFilter(doc("b")).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
				mongo.NewUpdateOneModel().SetFilter(doc("c")).SetUpdate(set("v", "changed")),
			})
			return err
		},
		refused:   code(14),
		committed: []string{"update a"},
		after:     []string{"a=changed", "b=b", "c=c"},
	}, {
		name: "updates and deletes that match nothing",
		seed: []bson.D{doc("a", "v", "old")},
		write: func(c context.Context, coll *mongo.Collection) error {
			if _, err := coll.UpdateOne(c, doc("nosuch"), set("v", "new")); err != nil {
				return err
			}
			if _, err := coll.UpdateMany(c, doc("a", "v", "other"), set("v", "new")); err != nil {
				return err
			}
			if _, err := coll.UpdateOne(c, doc("a"), set("v", "old")); err != nil { // matches, changes nothing
				return err
			}
			if _, err := coll.DeleteOne(c, doc("nosuch")); err != nil {
				return err
			}
			if _, err := coll.DeleteMany(c, bson.D{{Key: "v", Value: "other"}}); err != nil {
				return err
			}
			return coll.FindOneAndDelete(c, doc("nosuch")).Err()
		},
		refused: func(err error) bool { return err == mongo.ErrNoDocuments },
		after:   []string{"a=old"},
	}}
}

// TestRefusedWritesEmitNoEvents runs each refusedWrite against the shared (in-memory) server.
func TestRefusedWritesEmitNoEvents(t *testing.T) {
	client := testmongo.Client(t)
	db := testmongo.NewDatabase(t, client)
	for i, w := range refusedWrites() {
		t.Run(w.name, func(t *testing.T) { checkRefusedWrite(t, db.Collection(fmt.Sprintf("c%d", i)), w) })
	}
}

// TestRefusedWritesEmitNoEventsH2 runs each refusedWrite against a server that keeps its data in an H2 file (as
// scripts/run-local.sh runs it).
func TestRefusedWritesEmitNoEventsH2(t *testing.T) {
	managed(t)
	srv, err := testmongo.Start(ctx(t, 60*time.Second), testmongo.Options{H2File: filepath.Join(t.TempDir(), "mongo.h2")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	db := testmongo.ClientFor(t, srv.URI).Database("cronswap")
	for i, w := range refusedWrites() {
		t.Run(w.name, func(t *testing.T) { checkRefusedWrite(t, db.Collection(fmt.Sprintf("c%d", i)), w) })
	}
}

// checkRefusedWrite seeds coll, opens a change stream, makes the write, inserts a sentinel and checks that the
// events before the sentinel's are exactly the committed ones, and the collection's content.
func checkRefusedWrite(t *testing.T, coll *mongo.Collection, w refusedWrite) {
	c := ctx(t, 60*time.Second)
	for _, d := range w.seed {
		if _, err := coll.InsertOne(c, d); err != nil {
			t.Fatal(err)
		}
	}
	if w.index != nil {
		if _, err := coll.Indexes().CreateOne(c, mongo.IndexModel{Keys: w.index, Options: options.Index().SetUnique(true)}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())

	err = w.write(c, coll)
	t.Logf("write: %v", err)
	if w.refused == nil && err != nil || w.refused != nil && !w.refused(err) {
		t.Fatalf("the write was not refused as expected: %v", err)
	}
	if _, err := coll.InsertOne(c, doc("sentinel")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ev := next(t, cs, 10*time.Second)
		id := ev.Lookup("documentKey", "_id")
		key, ok := id.StringValueOK()
		if !ok {
			key = id.String()
		}
		e := opType(ev) + " " + key
		if e == "insert sentinel" {
			break
		}
		got = append(got, e)
		if len(got) > 10 {
			t.Fatalf("no sentinel after %v", got)
		}
	}
	want := slices.Clone(w.committed)
	if w.anyOrder {
		sort.Strings(got)
		sort.Strings(want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("events before the sentinel: %q, want %q (only the committed writes)", got, want)
	}

	if _, err := coll.DeleteOne(c, doc("sentinel")); err != nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.M
	if err := cur.All(c, &docs); err != nil {
		t.Fatal(err)
	}
	var after []string
	for _, d := range docs {
		s := fmt.Sprint(d["_id"])
		if v, ok := d["v"]; ok {
			s += "=" + fmt.Sprint(v)
		}
		after = append(after, s)
	}
	if !slices.Equal(after, w.after) {
		t.Errorf("collection afterwards: %q, want %q", after, w.after)
	}
}
