// Package scaledoc makes the documents of the scale benchmark
// (scripts/bench-scale.sh, scripts/bench-divide.sh): one schedule per
// customer, a yearly digest on January 1st at a minute and hour of its
// own, in a zone of its own, with args — nothing fires during a run. The
// in-process benchmarks of the start path (decode, edit history, engine)
// load the same documents, so their figures and the scale bench's speak
// of one fleet.
package scaledoc

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// zones are the zones documents cycle through; "" leaves the field out
// (the daemon's default zone).
var zones = [...]string{"", "UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Los_Angeles",
	"America/Sao_Paulo", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney", "Africa/Johannesburg", "Europe/Moscow",
	"America/Chicago", "Asia/Shanghai", "Pacific/Auckland", "Asia/Singapore", "Europe/Paris", "America/Denver",
	"Asia/Dubai", "America/Halifax"}

// ID is the job id (_id) of document k.
func ID(k int) string { return fmt.Sprintf("job-%06d", k) }

// Doc is document k, with updated_at now: its action is "noop".
func Doc(k int, now time.Time) bson.D {
	d := bson.D{
		{Key: "_id", Value: ID(k)},
		{Key: "cron_expr", Value: fmt.Sprintf("%d %d 1 1 *", k%60, (k/60)%24)},
		{Key: "job", Value: "noop"},
		{Key: "args", Value: bson.D{{Key: "customer", Value: fmt.Sprintf("c%07d", k)}, {Key: "digest", Value: "daily"}}},
		{Key: "updated_at", Value: now},
	}
	if z := zones[k%len(zones)]; z != "" {
		d = append(d, bson.E{Key: "timezone", Value: z})
	}
	return d
}
