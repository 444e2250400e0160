package admin

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/schedule"
)

// Author is who makes an edit of a schedules document, and why: every
// write of the command line and the status page carries it, so that the
// edit history (which copies the document's updated_by and update_message
// after each change) names the author of each edit and its message.
type Author struct {
	// By names who edits (updated_by); empty leaves updated_by as it is.
	By string
	// Message says why (update_message); empty removes the message an
	// earlier edit left, which was not this edit's reason.
	Message string
}

// stamp returns what a write sets and removes beside its own fields:
// updated_at, updated_by when a's By names someone, update_message when
// a has one (else it is removed).
func (a Author) stamp(at time.Time) (set, unset bson.D) {
	set = bson.D{{Key: schedule.FieldUpdatedAt, Value: at}}
	if a.By != "" {
		set = append(set, bson.E{Key: schedule.FieldUpdatedBy, Value: a.By})
	}
	if a.Message != "" {
		set = append(set, bson.E{Key: schedule.FieldUpdateMessage, Value: a.Message})
	} else {
		unset = bson.D{{Key: schedule.FieldUpdateMessage, Value: ""}}
	}
	return set, unset
}

// setUnset is the update document of set and unset ($set, and $unset
// unless unset is empty).
func setUnset(set, unset bson.D) bson.D {
	u := bson.D{{Key: "$set", Value: set}}
	if len(unset) > 0 {
		u = append(u, bson.E{Key: "$unset", Value: unset})
	}
	return u
}
