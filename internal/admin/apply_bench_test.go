package admin_test

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// BenchmarkReadByIDs reads 10,000 of 100,000 schedules by id, with $in
// lists of several lengths: what sets the length SchedulesByID uses
// (idsPerRead). Side by side in one run on the same data.
func BenchmarkReadByIDs(b *testing.B) {
	const stored, read = 100000, 10000
	ctx := context.Background()
	coll := testmongo.NewDatabase(b, testmongo.Client(b)).Collection("schedules")
	docs := make([]any, 0, 1000)
	for i := range stored {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("job_%07d", i)}, {Key: "cron_expr", Value: fmt.Sprintf("%d 9 * * *", i%60)}})
		if len(docs) == cap(docs) {
			if _, err := coll.InsertMany(ctx, docs); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	for _, per := range []int{1000, 300, 100, 30} {
		b.Run(fmt.Sprintf("ids_per_read=%d", per), func(b *testing.B) {
			for b.Loop() {
				n := 0
				for start := 0; start < read; start += per {
					ids := make([]string, 0, per)
					for i := start; i < start+per; i++ {
						ids = append(ids, fmt.Sprintf("job_%07d", i*(stored/read)))
					}
					cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, options.Find().SetBatchSize(int32(per)))
					if err != nil {
						b.Fatal(err)
					}
					for cur.Next(ctx) {
						n++
					}
					if err := cur.Err(); err != nil {
						b.Fatal(err)
					}
				}
				if n != read {
					b.Fatalf("read %d", n)
				}
			}
			b.ReportMetric(float64(read)*float64(b.N)/b.Elapsed().Seconds(), "docs/s")
		})
	}
}
