// Package members keeps the membership of the replicas that share one
// database: each running daemon holds one document in CollectionName,
// keyed by its instance id, and renews it every heartbeat interval. A
// member is live while its lease (heartbeat time plus lease) has not
// passed; Owner picks one live member per job by rendezvous hashing.
//
// # One process per instance id
//
// The document also says which process holds the instance id: its
// incarnation is random and new at every start. Join refuses to start a
// second live process with an id already held (a config file with
// instance_id copied to several machines), and a heartbeat that finds its
// document taken over by another incarnation ends Run with an error, so a
// process that lost its identity stops instead of firing as someone else.
//
// A restart of the same instance takes the document over when the
// previous process is gone: its lease passed, it removed its document on
// shutdown (Leave), or it ran on this machine (same boot id and process
// namespace) and its process no longer exists — the case of a restart
// right after a crash. Otherwise (another machine, or a process that may
// still be alive) Join waits until either the lease passes (dead: take
// over) or the heartbeat moves (alive: refuse), which takes at most the
// lease.
//
// # Ownership
//
// Owner picks a job's owner among live members. A Membership caches the
// live members it read after Join and after each heartbeat (one find per
// heartbeat), so Owns and LiveView answer per fire without a round trip;
// the process itself is always live in its own view. Ownership only decides
// who claims a fire first: the claim keeps each fire exactly once.
//
// # Consistency
//
// The collection is used with write concern majority and read concern
// majority, set on the collection whatever the connection string says: a
// membership written to a primary alone can be rolled back after a
// failover, and two processes would then both believe they hold the id.
package members

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// CollectionName is the collection of the members.
const CollectionName = "members"

// TTLIndex is the name of the index that removes a dead member's document
// at its expire_at.
const TTLIndex = "members_expire_at"

// Defaults of Options.
const (
	// DefaultHeartbeat is the period of the heartbeat write: one write
	// and one read of the live members (the cached view) per member every
	// 10 s, 12 commands per idle minute.
	DefaultHeartbeat = 10 * time.Second
	// DefaultLease is how long a member stays live after its last
	// heartbeat: three heartbeat periods, so two heartbeats may fail (a
	// slow primary, a short failover) before the others think it gone.
	DefaultLease = 30 * time.Second
	// DefaultRetention is how long a dead member's document is kept after
	// its lease ended (shown by `cronswap members list`), before the TTL
	// index removes it.
	DefaultRetention = time.Hour
)

// Member is one document of CollectionName: one running (or recently
// running) process of an instance id.
type Member struct {
	// ID is the instance id.
	ID string `bson:"_id" json:"instance_id"`
	// Host is the host name of the process.
	Host string `bson:"host" json:"host"`
	// PID is the process id on that host.
	PID int `bson:"pid" json:"pid"`
	// Machine identifies the machine and process namespace the PID is in
	// (Linux boot id and pid namespace; empty where unknown).
	Machine string `bson:"machine,omitempty" json:"-"`
	// Incarnation is random and new at every start of a process.
	Incarnation string `bson:"incarnation" json:"incarnation"`
	// HTTP is the address the process's HTTP listener is bound to
	// (host:port, e.g. "127.0.0.1:9090" or "[::]:9090"), so that the
	// command line can ask a live daemon what its engine holds; empty when
	// unknown.
	HTTP string `bson:"http,omitempty" json:"http,omitempty"`
	// Divides is true when the member divides the schedules with the
	// other members (it arms only the jobs Armers names it for) rather
	// than arming every job.
	Divides bool `bson:"divides,omitempty" json:"divides,omitempty"`
	// StartedAt is when this incarnation registered.
	StartedAt time.Time `bson:"started_at" json:"started_at"`
	// FiringSince is when this incarnation's engine began firing
	// (Membership.Firing); zero until then. It then reads what the
	// database decided before that, to find its start-up gap. A member
	// that starts while another fires needs no such read for the jobs the
	// other arms: the other decides every slot meanwhile.
	FiringSince time.Time `bson:"firing_since,omitempty" json:"firing_since,omitzero"`
	// HeartbeatAt is the member's last heartbeat.
	HeartbeatAt time.Time `bson:"heartbeat_at" json:"heartbeat_at"`
	// LeaseUntil is HeartbeatAt plus the lease: the member is live until then.
	LeaseUntil time.Time `bson:"lease_until" json:"lease_until"`
	// ExpireAt is when the TTL index removes the document: LeaseUntil plus
	// the retention.
	ExpireAt time.Time `bson:"expire_at" json:"expire_at"`
}

// LiveAt reports whether m's lease has not passed at now.
func (m Member) LiveAt(now time.Time) bool { return now.Before(m.LeaseUntil) }

// Collection returns db's members collection with write concern majority
// and read concern majority (see the package doc).
func Collection(db *mongo.Database) *mongo.Collection {
	return db.Collection(CollectionName, options.Collection().
		SetWriteConcern(writeconcern.Majority()).
		SetReadConcern(readconcern.Majority()))
}

// Indexes returns the indexes of CollectionName beyond _id: a TTL index on
// expire_at (each document carries its own expiry, hence
// expireAfterSeconds 0), so dead members vanish DefaultRetention after
// their lease ended (plus up to a minute, the TTL monitor's period).
func Indexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "expire_at", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0).SetName(TTLIndex)},
	}
}

// EnsureIndexes creates Indexes on coll; existing ones are left alone.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection) error {
	if _, err := coll.Indexes().CreateMany(ctx, Indexes()); err != nil {
		return fmt.Errorf("create the indexes of %s: %w", coll.Name(), err)
	}
	return nil
}

// List returns every document of the members collection of db, live or
// not, ordered by instance id.
func List(ctx context.Context, db *mongo.Database) ([]Member, error) {
	coll := Collection(db)
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	var out []Member
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	return out, nil
}

// Live returns the members of ms whose lease has not passed at now.
func Live(ms []Member, now time.Time) []Member {
	var out []Member
	for _, m := range ms {
		if m.LiveAt(now) {
			out = append(out, m)
		}
	}
	return out
}

// newIncarnation returns a random incarnation: 16 hex digits.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// DuplicateError is Join's refusal: another live process holds the
// instance id.
type DuplicateError struct {
	// Other is that process's document.
	Other Member
	// Now is when the refusal was decided (for the heartbeat age).
	Now time.Time
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("instance id %q is already in use by a live process on host %q (pid %d, incarnation %s, "+
		"last heartbeat %s ago, lease until %s): give each replica its own instance_id",
		e.Other.ID, e.Other.Host, e.Other.PID, e.Other.Incarnation,
		e.Now.Sub(e.Other.HeartbeatAt).Round(time.Millisecond), e.Other.LeaseUntil.UTC().Format(time.RFC3339))
}

// TakenOverError ends Run: this process's membership document now belongs
// to another incarnation of the same instance id.
type TakenOverError struct {
	// ID is the instance id.
	ID string
	// Incarnation is this process's incarnation.
	Incarnation string
	// Other is the document that replaced this process's, when it could
	// be read (zero otherwise).
	Other Member
}

func (e *TakenOverError) Error() string {
	if e.Other.Incarnation == "" {
		return fmt.Sprintf("membership of instance id %q (incarnation %s) was taken over by another process: stopping",
			e.ID, e.Incarnation)
	}
	return fmt.Sprintf("membership of instance id %q (incarnation %s) was taken over by another process on host %q "+
		"(pid %d, incarnation %s): stopping; give each replica its own instance_id",
		e.ID, e.Incarnation, e.Other.Host, e.Other.PID, e.Other.Incarnation)
}

// IsDuplicate reports whether err is, or wraps, a DuplicateError or a
// TakenOverError.
func IsDuplicate(err error) bool {
	var d *DuplicateError
	var t *TakenOverError
	return errors.As(err, &d) || errors.As(err, &t)
}
