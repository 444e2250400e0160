package history

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/testmongo"
)

func TestMain(m *testing.M) { testmongo.Main(m, nil) }

// TestWritersOfThreeReplicasStoreEachEntryOnce runs three writers (one per
// replica) over the same entries, one of them twice (a replay after a
// restart), and checks that each entry is stored once, read back intact
// and newest first.
func TestWritersOfThreeReplicasStoreEachEntryOnce(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	coll := db.Collection(CollectionName)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	entries := make([]Entry, 5)
	for i := range entries {
		at := wall0.Add(time.Duration(i) * time.Minute)
		entries[i] = Entry{ID: fmt.Sprintf("82%014X", i+1), JobID: "daily_report", At: at, Op: OpUpdate,
			Changes: []Change{{Field: "cron_expr",
				Before: bson.RawValue{Type: bson.TypeString, Value: bsoncoreString(fmt.Sprintf("%d * * * *", i))},
				After:  bson.RawValue{Type: bson.TypeString, Value: bsoncoreString(fmt.Sprintf("%d * * * *", i+1))}}},
			ExpireAt: at.Add(time.Hour), RecordedAt: at}
	}
	entries[0].Changes = append(entries[0].Changes, Change{Field: "timezone", After: bson.RawValue{Type: bson.TypeString, Value: bsoncoreString("UTC")}})
	entries[1].UpdatedBy = "alice"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for replica := range 4 { // the fourth is the first replaying after a restart
		w := NewWriter(coll, WriterOptions{Logger: log, Batch: 2})
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		for _, e := range entries {
			e.Instance = fmt.Sprintf("r%d", replica%3)
			if !w.Enqueue(e) {
				t.Fatal("queue refused an entry")
			}
		}
		w.Close()
		<-done
		if w.Enqueue(entries[0]) {
			t.Fatal("a closed writer accepted an entry")
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 5 {
		t.Fatalf("%d entries stored (err %v), want 5", n, err)
	}
	got, err := List(ctx, coll, "daily_report", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != entries[4].ID || got[2].ID != entries[2].ID {
		t.Fatalf("List limit 3 = %v, want entries 5, 4, 3", got)
	}
	all, err := List(ctx, coll, "daily_report", 0)
	if err != nil || len(all) != 5 {
		t.Fatalf("List all = %d entries, %v", len(all), err)
	}
	first := all[4]
	if first.Instance != "r0" || len(first.Changes) != 2 || !first.Changes[1].Before.IsZero() ||
		first.Changes[1].After.StringValue() != "UTC" || first.Changes[0].Before.StringValue() != "0 * * * *" || !first.At.Equal(wall0) {
		t.Fatalf("first entry read back as %+v", first)
	}
	if all[3].UpdatedBy != "alice" || all[4].UpdatedBy != "" {
		t.Fatalf("updated_by read back as %q and %q", all[3].UpdatedBy, all[4].UpdatedBy)
	}
	if none, err := List(ctx, coll, "other", 0); err != nil || len(none) != 0 {
		t.Fatalf("List of another job = %v, %v", none, err)
	}
}

// bsoncoreString is the BSON encoding of a string value.
func bsoncoreString(s string) []byte {
	b, _ := bson.Marshal(bson.D{{Key: "v", Value: s}})
	v := bson.Raw(b).Lookup("v")
	return v.Value
}
