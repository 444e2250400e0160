package faultproxy

import (
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Matcher decides whether a client command should be failed. It receives
// the command document: the section-0 body of an OP_MSG, or the (unwrapped)
// query of an OP_QUERY "$cmd" command. The first key is the command name.
// Document-sequence sections (the bulk payloads of insert/update/delete) are
// not included.
//
// Matchers run on the proxy's connection goroutines and may be called
// concurrently. They must not retain cmd after returning.
type Matcher func(cmd bsoncore.Document) bool

// CommandName matches commands whose name (the first key of the command
// document) is one of names, e.g. "aggregate", "getMore", "find", "update",
// "findAndModify". The comparison is case-sensitive, as in mongod's
// failCommand; note that the driver's legacy handshake sends "isMaster".
func CommandName(names ...string) Matcher {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	return func(cmd bsoncore.Document) bool {
		_, ok := set[commandNameOf(cmd)]
		return ok
	}
}

// AnyCommand matches every command.
func AnyCommand(bsoncore.Document) bool { return true }

// IsChangeStreamAggregate reports whether cmd is an aggregate whose
// pipeline's first stage is $changeStream: the command that opens (or
// resumes) a change stream. It can be used directly as a Matcher.
func IsChangeStreamAggregate(cmd bsoncore.Document) bool {
	if commandNameOf(cmd) != "aggregate" {
		return false
	}
	pipeline, ok := cmd.Lookup("pipeline").ArrayOK()
	if !ok {
		return false
	}
	first, err := pipeline.IndexErr(0)
	if err != nil {
		return false
	}
	stage, ok := first.DocumentOK()
	if !ok {
		return false
	}
	return commandNameOf(stage) == "$changeStream"
}

// Database matches commands addressed to database db (the OP_MSG "$db"
// field). OP_QUERY commands carry no "$db" and never match.
func Database(db string) Matcher {
	return func(cmd bsoncore.Document) bool {
		s, ok := cmd.Lookup("$db").StringValueOK()
		return ok && s == db
	}
}

// Collection matches commands whose first value is the collection name
// coll, as for find, aggregate, insert, update, delete, findAndModify and
// count. getMore names its collection in a "collection" field instead, which
// is also accepted.
func Collection(coll string) Matcher {
	return func(cmd bsoncore.Document) bool {
		first, err := cmd.IndexErr(0)
		if err != nil {
			return false
		}
		if s, ok := first.Value().StringValueOK(); ok && s == coll {
			return true
		}
		if commandNameOf(cmd) == "getMore" {
			s, ok := cmd.Lookup("collection").StringValueOK()
			return ok && s == coll
		}
		return false
	}
}

// All matches when every one of ms matches (and vacuously when ms is
// empty).
func All(ms ...Matcher) Matcher {
	return func(cmd bsoncore.Document) bool {
		for _, m := range ms {
			if !m(cmd) {
				return false
			}
		}
		return true
	}
}

// AnyOf matches when at least one of ms matches.
func AnyOf(ms ...Matcher) Matcher {
	return func(cmd bsoncore.Document) bool {
		for _, m := range ms {
			if m(cmd) {
				return true
			}
		}
		return false
	}
}

// Not inverts m.
func Not(m Matcher) Matcher {
	return func(cmd bsoncore.Document) bool { return !m(cmd) }
}
