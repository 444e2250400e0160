package members

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Options configures a Membership. Zero durations take the defaults.
type Options struct {
	// InstanceID is this process's instance id (required).
	InstanceID string
	// Host is the host name recorded (default os.Hostname()).
	Host string
	// HTTP is the address of this process's HTTP listener, recorded as
	// Member.HTTP (empty: none recorded).
	HTTP string
	// Divides is recorded as Member.Divides: this process arms only the
	// jobs Armers names it for.
	Divides bool
	// Heartbeat is the period of the heartbeat write (default
	// DefaultHeartbeat).
	Heartbeat time.Duration
	// Lease is how long the member stays live after a heartbeat (default
	// DefaultLease; raised to twice Heartbeat when shorter).
	Lease time.Duration
	// Retention is how long the document outlives its lease before the
	// TTL index removes it (default DefaultRetention).
	Retention time.Duration
	// Logger receives the membership's logs, with host and incarnation
	// added (default slog.Default()); the daemon's already carries the
	// instance_id.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Unreachable, when set, is called (from Join's goroutine) each time a
	// join attempt fails to read or write the collection, as when the
	// database is not reachable yet; it is not called while Join waits on
	// a live holder of the id.
	Unreachable func(err error)
}

// joinPoll is how often Join looks at a document it waits on.
const joinPoll = time.Second

// joinRetry is Join's pause after a failed read or write.
const joinRetry = time.Second

// codeDuplicateKey is the server's duplicate key error.
const codeDuplicateKey = 11000

// Membership is this process's member document: Join registers it, Run
// renews it, Leave removes it. Live reads the others; Owns and LiveView
// answer from a cached view of them, read after Join and after each
// heartbeat. Its methods are safe for concurrent use.
type Membership struct {
	coll *mongo.Collection
	opts Options
	log  *slog.Logger

	// selfID and selfIncarnation are this process's, fixed at New.
	selfID, selfIncarnation string
	// createdAt is when New ran: the heartbeat age counts from it until
	// the first heartbeat is written.
	createdAt time.Time

	mu   sync.Mutex
	self Member // as last written; the fields other than times are fixed at New
	// firingSince is Member.FiringSince, kept apart from self so that a
	// heartbeat written before Firing cannot take it back.
	firingSince time.Time

	// view is the cached read of the live members (nil before the first
	// read), replaced whole by refreshView.
	view atomic.Pointer[view]
}

// New returns the membership of this process in db's members collection.
// It does not talk to the server.
func New(db *mongo.Database, opts Options) *Membership {
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	opts.Lease = max(opts.Lease, 2*opts.Heartbeat)
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	self := Member{ID: opts.InstanceID, Host: opts.Host, PID: os.Getpid(), Machine: machineID(),
		Incarnation: newIncarnation(), HTTP: opts.HTTP, Divides: opts.Divides}
	return &Membership{coll: Collection(db), opts: opts, self: self,
		selfID: self.ID, selfIncarnation: self.Incarnation, createdAt: opts.Now(),
		log: opts.Logger.With("host", self.Host, "incarnation", self.Incarnation)}
}

// Self returns this process's member document as last written (the
// times are zero before Join).
func (m *Membership) Self() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

func (m *Membership) setSelf(d Member) {
	m.mu.Lock()
	m.self = d
	m.mu.Unlock()
}

// Heartbeat returns the effective heartbeat period.
func (m *Membership) Heartbeat() time.Duration { return m.opts.Heartbeat }

// HeartbeatAge returns the time since this process last wrote its member
// document (Join, then each heartbeat that landed), or since New while it
// has written none: it grows while the heartbeats fail, and past Lease the
// other members count this one gone.
func (m *Membership) HeartbeatAge() time.Duration {
	last := m.Self().HeartbeatAt
	if last.IsZero() {
		last = m.createdAt
	}
	return m.opts.Now().Sub(last)
}

// Lease returns the effective lease.
func (m *Membership) Lease() time.Duration { return m.opts.Lease }

// doc is this process's document as of now.
func (m *Membership) doc(now time.Time) Member {
	d := m.Self()
	if d.StartedAt.IsZero() {
		d.StartedAt = now
	}
	m.mu.Lock()
	d.FiringSince = m.firingSince
	m.mu.Unlock()
	d.HeartbeatAt = now
	d.LeaseUntil = now.Add(m.opts.Lease)
	d.ExpireAt = d.LeaseUntil.Add(m.opts.Retention)
	return d
}

// Join registers this process under its instance id, taking over the
// document of a previous process of the instance that is gone (see the
// package doc). While the holder may still be alive it waits — at most
// until the holder's lease passes — and returns a *DuplicateError as soon
// as the holder heartbeats. Read or write failures are retried until ctx
// ends. Once registered it reads the live members once for the cached
// view (Owns, LiveView); a failure of that read leaves the view unknown
// until the next heartbeat and does not fail Join.
func (m *Membership) Join(ctx context.Context) error {
	var waiting *Member // the holder Join waits on
	failures := 0
	for {
		now := m.opts.Now()
		var cur Member
		err := m.coll.FindOne(ctx, bson.D{{Key: "_id", Value: m.opts.InstanceID}}).Decode(&cur)
		done, err := m.joinStep(ctx, now, cur, err, &waiting)
		if done {
			m.refreshAfter(ctx, "joining")
			return nil
		}
		if err != nil && (ctx.Err() != nil || IsDuplicate(err)) {
			return err
		}
		wait := joinPoll
		if err != nil {
			failures++
			if m.opts.Unreachable != nil {
				m.opts.Unreachable(err)
			}
			if failures == 1 || failures%30 == 0 {
				m.log.Warn("cannot register in "+CollectionName+" yet; retrying", "error", err, "attempts", failures)
			}
			wait = joinRetry
		} else if waiting != nil {
			wait = min(wait, max(time.Until(waiting.LeaseUntil), time.Millisecond))
		} else {
			continue // the document changed under a write of ours: look again at once
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// joinStep acts on one read of the document (cur, or readErr): done is
// true once registered; a non-nil error is a failure to retry, or the
// refusal. A false done with a nil error means look again (after a pause
// when *waiting is set).
func (m *Membership) joinStep(ctx context.Context, now time.Time, cur Member, readErr error, waiting **Member) (bool, error) {
	switch {
	case errors.Is(readErr, mongo.ErrNoDocuments):
		fresh := m.doc(now)
		_, err := m.coll.InsertOne(ctx, fresh)
		if hasCode(err, codeDuplicateKey) {
			return false, nil // registered by another process meanwhile
		}
		if err != nil {
			return false, fmt.Errorf("register in %s: %w", CollectionName, err)
		}
		m.setSelf(fresh)
		m.log.Info("joined the members", "heartbeat", m.opts.Heartbeat, "lease", m.opts.Lease)
		return true, nil
	case readErr != nil:
		return false, fmt.Errorf("read %s: %w", CollectionName, readErr)
	}
	var reason string
	switch {
	case !cur.LiveAt(now):
		reason = "its lease passed"
	case cur.Machine != "" && cur.Machine == machineID() && cur.PID != os.Getpid() && !processAlive(cur.PID):
		reason = "its process on this machine is gone"
	case *waiting != nil && (*waiting).Incarnation != cur.Incarnation:
		// Another process registered while this one waited: it is alive.
		return false, &DuplicateError{Other: cur, Now: now}
	case *waiting != nil && !(*waiting).HeartbeatAt.Equal(cur.HeartbeatAt):
		return false, &DuplicateError{Other: cur, Now: now}
	default:
		if *waiting == nil {
			m.log.Warn("instance id held by another process whose lease has not passed; "+
				"waiting for the lease to pass (a crashed process) or its next heartbeat (a live one: refused)",
				"other_host", cur.Host, "other_pid", cur.PID, "other_incarnation", cur.Incarnation,
				"heartbeat_age", now.Sub(cur.HeartbeatAt).Round(time.Millisecond),
				"lease_left", cur.LeaseUntil.Sub(now).Round(time.Millisecond))
		}
		*waiting = &cur
		return false, nil
	}
	fresh := m.doc(now)
	res, err := m.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: cur.ID}, {Key: "incarnation", Value: cur.Incarnation}}, fresh)
	if err != nil {
		return false, fmt.Errorf("take over the document of %s in %s: %w", cur.ID, CollectionName, err)
	}
	if res.MatchedCount == 0 {
		*waiting = nil
		return false, nil // changed meanwhile: decide again
	}
	m.setSelf(fresh)
	m.log.Info("joined the members, taking over the document of a previous process of this instance",
		"reason", reason, "previous_host", cur.Host, "previous_pid", cur.PID, "previous_incarnation", cur.Incarnation,
		"previous_heartbeat_age", now.Sub(cur.HeartbeatAt).Round(time.Millisecond),
		"heartbeat", m.opts.Heartbeat, "lease", m.opts.Lease)
	return true, nil
}

// Run renews the membership every heartbeat interval until ctx ends (nil)
// or the document was taken over by another incarnation (a
// *TakenOverError, logged at error). A failed heartbeat is logged and
// retried at the next interval; a document found missing (removed by an
// operator, the TTL index after a long outage, a dropped database) is
// written again. After each heartbeat, written or not, it reads the live
// members once (one find) for the cached view of Owns and LiveView: two
// commands per heartbeat in all. Call it after Join.
func (m *Membership) Run(ctx context.Context) error {
	t := time.NewTicker(m.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := m.beat(ctx); err != nil {
			return err
		}
		m.refreshAfter(ctx, "the heartbeat")
	}
}

// beat writes one heartbeat: one update, conditional on this
// incarnation, upserting a missing document.
func (m *Membership) beat(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, m.opts.Heartbeat)
	defer cancel()
	now := m.opts.Now()
	d := m.doc(now)
	set := bson.D{
		{Key: "host", Value: d.Host}, {Key: "pid", Value: d.PID}, {Key: "machine", Value: d.Machine}, {Key: "http", Value: d.HTTP},
		{Key: "divides", Value: d.Divides},
		{Key: "started_at", Value: d.StartedAt}, {Key: "heartbeat_at", Value: d.HeartbeatAt},
		{Key: "lease_until", Value: d.LeaseUntil}, {Key: "expire_at", Value: d.ExpireAt},
	}
	if !d.FiringSince.IsZero() {
		set = append(set, bson.E{Key: "firing_since", Value: d.FiringSince})
	}
	res, err := m.coll.UpdateOne(bctx,
		bson.D{{Key: "_id", Value: d.ID}, {Key: "incarnation", Value: d.Incarnation}},
		bson.D{{Key: "$set", Value: set}},
		options.UpdateOne().SetUpsert(true))
	switch {
	case hasCode(err, codeDuplicateKey):
		te := &TakenOverError{ID: d.ID, Incarnation: d.Incarnation}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.Heartbeat)
		defer rcancel()
		_ = m.coll.FindOne(rctx, bson.D{{Key: "_id", Value: d.ID}}).Decode(&te.Other)
		m.log.Error("membership taken over by another process with the same instance id; stopping",
			"other_host", te.Other.Host, "other_pid", te.Other.PID, "other_incarnation", te.Other.Incarnation)
		return te
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("membership heartbeat failed; retrying at the next heartbeat", "error",
				fmt.Errorf("update %s: %w", CollectionName, err),
				"lease_left", m.Self().LeaseUntil.Sub(now).Round(time.Millisecond))
		}
		return nil
	case res.UpsertedCount == 1:
		m.log.Warn("membership document was missing; registered again")
	}
	m.setSelf(d)
	return nil
}

// Firing records that this process's engine fires from at on
// (Member.FiringSince), and writes it at once with a heartbeat (one update); the heartbeats after
// it carry it too, so a failed write here is made good by the next one.
// Call it once, after Join.
func (m *Membership) Firing(ctx context.Context, at time.Time) error {
	m.mu.Lock()
	m.firingSince = at
	m.self.FiringSince = at // this process's view of itself, written or not
	m.mu.Unlock()
	return m.beat(ctx)
}

// Leave removes this process's document, if it still holds it, so that
// the other members see it gone at once.
func (m *Membership) Leave(ctx context.Context) error {
	self := m.Self()
	_, err := m.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: self.ID}, {Key: "incarnation", Value: self.Incarnation}})
	if err != nil {
		return fmt.Errorf("remove %s from %s: %w", self.ID, CollectionName, err)
	}
	m.log.Info("left the members")
	return nil
}

// Live returns the members whose lease has not passed, ordered by
// instance id.
func (m *Membership) Live(ctx context.Context) ([]Member, error) {
	all, err := List(ctx, m.coll.Database())
	if err != nil {
		return nil, err
	}
	return Live(all, m.opts.Now()), nil
}

func hasCode(err error, code int) bool {
	if err == nil {
		return false
	}
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
