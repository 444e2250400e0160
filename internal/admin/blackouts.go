package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/schedule"
)

// ErrExists is wrapped when a document to be created already exists.
var ErrExists = errors.New("already exists")

// BlackoutDoc is one document of the blackouts collection as the command
// line shows it: the window when the document is valid, else its error
// (the daemon refuses it the same way, and keeps a window's last valid
// version in force).
type BlackoutDoc struct {
	Window blackout.Window
	// Error is the document's validation error; "" when valid.
	Error string
	// UpdatedAt is the document's updated_at, zero when absent.
	UpdatedAt time.Time
}

// Blackouts returns every window document, sorted by _id, validated as the
// daemon validates them (loc is the zone of recurring windows that name
// none).
func (s *Store) Blackouts(ctx context.Context, loc *time.Location) ([]BlackoutDoc, error) {
	coll := s.db.Collection(blackout.CollectionName)
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	out := []BlackoutDoc{}
	for cur.Next(ctx) {
		w, err := blackout.Decode(cur.Current, loc)
		d := BlackoutDoc{Window: w}
		if err != nil {
			d.Error = err.Error()
		}
		if v, err := cur.Current.LookupErr(blackout.FieldUpdatedAt); err == nil {
			d.UpdatedAt, _ = v.TimeOK()
		}
		out = append(out, d)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	return out, nil
}

// AddBlackout validates doc as the daemon would (an error wrapping
// blackout.ErrInvalid when it is not a window), sets its updated_at and
// inserts it; a window with the same _id is ErrExists.
func (s *Store) AddBlackout(ctx context.Context, doc bson.D, loc *time.Location) (blackout.Window, error) {
	doc = append(doc, bson.E{Key: blackout.FieldUpdatedAt, Value: s.now().UTC()})
	raw, err := bson.Marshal(doc)
	if err != nil {
		return blackout.Window{}, fmt.Errorf("blackout window: %w", err)
	}
	w, err := blackout.Decode(raw, loc)
	if err != nil {
		return w, err
	}
	coll := s.db.Collection(blackout.CollectionName)
	if _, err := coll.InsertOne(ctx, raw); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return w, fmt.Errorf("blackout window %q: %w", w.ID, ErrExists)
		}
		return w, fmt.Errorf("insert blackout window %q into %s: %w", w.ID, coll.Name(), err)
	}
	return w, nil
}

// DeleteBlackout removes window id: the daemons fire its jobs again at
// once. A missing window is ErrNotFound.
func (s *Store) DeleteBlackout(ctx context.Context, id string) error {
	coll := s.db.Collection(blackout.CollectionName)
	res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("delete blackout window %q from %s: %w", id, coll.Name(), err)
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("blackout window %q: %w", id, ErrNotFound)
	}
	return nil
}

// CategoryEdit is the outcome of SetEnabledByCategory.
type CategoryEdit struct {
	// Matched counts the schedules of the category; Changed those that
	// were not already paused (or resumed) and were written.
	Matched int64 `json:"matched"`
	Changed int64 `json:"changed"`
}

// SetEnabledByCategory pauses (false) or resumes (true) every schedule of
// category in one updateMany, with the stamp of Author{By: by} on those it
// changes (SetEnabled's rules: an already paused or resumed document is
// left alone, so the daemons see no event for it).
func (s *Store) SetEnabledByCategory(ctx context.Context, category string, enabled bool, by string) (CategoryEdit, error) {
	coll := s.db.Collection(schedule.CollectionName)
	inCategory := bson.D{{Key: schedule.FieldCategory, Value: category}}
	filter := inCategory
	if enabled {
		filter = append(filter, bson.E{Key: schedule.FieldEnabled, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: true}}})
	} else {
		filter = append(filter, bson.E{Key: schedule.FieldEnabled, Value: bson.D{{Key: "$ne", Value: false}}})
	}
	set, unset := Author{By: by}.stamp(s.now().UTC())
	set = append(bson.D{{Key: schedule.FieldEnabled, Value: enabled}}, set...)
	res, err := coll.UpdateMany(ctx, filter, setUnset(set, unset))
	if err != nil {
		return CategoryEdit{}, fmt.Errorf("set enabled=%t on the schedules of category %q: %w", enabled, category, err)
	}
	n, err := coll.CountDocuments(ctx, inCategory)
	if err != nil {
		return CategoryEdit{}, fmt.Errorf("count the schedules of category %q: %w", category, err)
	}
	return CategoryEdit{Matched: n, Changed: res.MatchedCount}, nil
}
