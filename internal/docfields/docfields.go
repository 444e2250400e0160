// Package docfields names the top-level fields of a schedules document —
// those the daemons read and those the tools write beside them — and
// points out a field nobody reads that looks like a misspelling of one
// (enabeld, cronExpr, time_zone). The daemons ignore fields they do not
// know, so that documents may carry notes of their own; without this, a
// typo such as {$set: {enabeld: false}} would change nothing, silently.
package docfields

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/cronswap/cronswap/internal/lifetime"
	"github.com/cronswap/cronswap/schedule"
)

// ManagedBy is the field `cronswap apply` writes on the documents it
// created or updated (the daemons ignore it).
const ManagedBy = "managed_by"

// Known returns every top-level field of a schedules document that
// cronswap reads or writes, in the order of the data model's table.
func Known() []string {
	return []string{schedule.FieldID, schedule.FieldCronExpr, schedule.FieldUpdatedAt, schedule.FieldUpdatedBy,
		schedule.FieldEnabled, schedule.FieldTimezone, schedule.FieldDST, schedule.FieldJob, schedule.FieldArgs,
		schedule.FieldCategory, lifetime.FieldStartAt, lifetime.FieldEndAt, lifetime.FieldMaxRuns,
		lifetime.FieldPausedUntil, schedule.FieldExclude, ManagedBy, schedule.FieldUpdateMessage}
}

// isKnown reports whether key is one of Known, without allocating: it is
// asked of every field of every document a full read decodes.
func isKnown(key string) bool {
	switch key {
	case schedule.FieldID, schedule.FieldCronExpr, schedule.FieldUpdatedAt, schedule.FieldUpdatedBy,
		schedule.FieldEnabled, schedule.FieldTimezone, schedule.FieldDST, schedule.FieldJob, schedule.FieldArgs,
		schedule.FieldCategory, lifetime.FieldStartAt, lifetime.FieldEndAt, lifetime.FieldMaxRuns,
		lifetime.FieldPausedUntil, schedule.FieldExclude, ManagedBy, schedule.FieldUpdateMessage:
		return true
	}
	return false
}

// Misspelling is a field of a document that no one reads and that looks
// like a known one.
type Misspelling struct {
	// Field is the field as the document spells it.
	Field string
	// Meant is the known field it looks like.
	Meant string
}

// Misspellings returns the top-level fields of doc that are not known but
// look like a known field: a word for it (disabled, tz, cron, params), the
// same but for case, underscores and hyphens (cronExpr, TimeZone), or one
// edit away — two for a name of more than six letters — (enabeld,
// cron_exp, timezome). Other unknown fields,
// a document's own notes, are not listed. It returns nil for a document
// that is not well-formed.
func Misspellings(doc bson.Raw) []Misspelling {
	if len(doc) < 5 {
		return nil
	}
	var out []Misspelling
	rest := bsoncore.Document(doc[4 : len(doc)-1])
	for len(rest) > 0 {
		elem, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			return out
		}
		rest = next
		key := elem.KeyBytes()
		if isKnown(string(key)) {
			continue
		}
		if meant := lookalike(string(key)); meant != "" {
			out = append(out, Misspelling{Field: string(key), Meant: meant})
		}
	}
	return out
}

// synonym returns the known field norm, a normalized name, is a word for
// (words an operator may write for it, not typos), or "".
func synonym(norm string) string {
	switch norm {
	case "disabled", "paused", "active":
		return schedule.FieldEnabled
	case "cron", "expr", "expression", "cronexpression", "schedule":
		return schedule.FieldCronExpr
	case "tz", "zone":
		return schedule.FieldTimezone
	case "action", "handler":
		return schedule.FieldJob
	case "params", "parameters", "arguments":
		return schedule.FieldArgs
	}
	return ""
}

// lookalike returns the known field key looks like, or "".
func lookalike(key string) string {
	norm := normalize(key)
	if k := synonym(norm); k != "" {
		return k
	}
	best, bestDist := "", 3
	for _, k := range Known() {
		if norm == normalize(k) {
			return k
		}
		limit := 1
		if len(k) > 6 {
			limit = 2
		}
		if len(key) < 3 {
			continue
		}
		if d := distance(strings.ToLower(key), k, limit); d <= limit && d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// normalize is s in lower case without underscores and hyphens.
func normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// distance is the optimal string alignment distance between a and b (edits:
// insert, delete, replace a byte, swap two adjacent bytes), or limit+1 once
// it is known to exceed limit.
func distance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
