package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/calendar"
)

// CalendarDoc is one document of the calendars collection as the command
// line shows it: the calendar when the document is valid, else its error.
type CalendarDoc struct {
	Calendar calendar.Calendar
	// Error is the document's validation error; "" when valid.
	Error string
	// UpdatedAt and UpdatedBy are the document's, zero when absent.
	UpdatedAt time.Time
	UpdatedBy string
}

func calendarDoc(raw bson.Raw) CalendarDoc {
	c, err := calendar.Decode(raw)
	d := CalendarDoc{Calendar: c}
	if err != nil {
		d.Error = err.Error()
	}
	if v, err := raw.LookupErr(calendar.FieldUpdatedAt); err == nil {
		d.UpdatedAt, _ = v.TimeOK()
	}
	if v, err := raw.LookupErr(calendar.FieldUpdatedBy); err == nil {
		d.UpdatedBy, _ = v.StringValueOK()
	}
	return d
}

// Calendars returns every calendar document, sorted by name, validated as
// the daemons validate them.
func (s *Store) Calendars(ctx context.Context) ([]CalendarDoc, error) {
	coll := s.db.Collection(calendar.CollectionName)
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	out := []CalendarDoc{}
	for cur.Next(ctx) {
		out = append(out, calendarDoc(cur.Current))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	return out, nil
}

// Calendar returns the calendar document name; a missing one is
// ErrNotFound.
func (s *Store) Calendar(ctx context.Context, name string) (CalendarDoc, error) {
	coll := s.db.Collection(calendar.CollectionName)
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return CalendarDoc{}, fmt.Errorf("calendar %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return CalendarDoc{}, fmt.Errorf("read calendar %q from %s: %w", name, coll.Name(), err)
	}
	return calendarDoc(raw), nil
}

// PutCalendar writes c as its calendars document, replacing any document
// of the same name (an import of the year's new file replaces the old
// one whole), with updated_at and updated_by (by may be empty). It checks
// the document as the daemons would first: an error wraps
// calendar.ErrInvalid. created reports whether there was none before.
func (s *Store) PutCalendar(ctx context.Context, c calendar.Calendar, by string) (created bool, err error) {
	doc := append(c.Document(), bson.E{Key: calendar.FieldUpdatedAt, Value: s.now().UTC()})
	if by != "" {
		doc = append(doc, bson.E{Key: calendar.FieldUpdatedBy, Value: by})
	}
	raw, err := bson.Marshal(doc)
	if err != nil {
		return false, fmt.Errorf("calendar %q: %w", c.Name, err)
	}
	if _, err := calendar.Decode(raw); err != nil {
		return false, err
	}
	coll := s.db.Collection(calendar.CollectionName)
	res, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: c.Name}}, raw, options.Replace().SetUpsert(true))
	if err != nil {
		return false, fmt.Errorf("write calendar %q to %s: %w", c.Name, coll.Name(), err)
	}
	return res.UpsertedCount == 1, nil
}

// DeleteCalendar removes calendar name; a missing one is ErrNotFound.
func (s *Store) DeleteCalendar(ctx context.Context, name string) error {
	coll := s.db.Collection(calendar.CollectionName)
	res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: name}})
	if err != nil {
		return fmt.Errorf("delete calendar %q from %s: %w", name, coll.Name(), err)
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("calendar %q: %w", name, ErrNotFound)
	}
	return nil
}
