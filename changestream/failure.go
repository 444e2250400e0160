package changestream

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Server error codes of a read that fails the same way every time it is
// tried: the data or the query is the problem, not the connection.
var repeatingCodes = []int{
	10334, // BSONObjectTooLarge: a document or reply the server cannot build
	17419, // "Resulting document after update is larger than …"
	2,     // BadValue
	9,     // FailedToParse
	14,    // TypeMismatch
	22,    // InvalidBSON
	// Unauthorized: no retry fixes it; an operator must grant the role.
	13,
}

// repeatingTexts are errors that carry no code but recur on every attempt.
var repeatingTexts = []string{
	// The driver refuses a reply above its 48 MB message limit: a server
	// that does not cut its batches, and answers the same way each time.
	"length of read message too large",
}

// repeatAfter is how many consecutive failures with the same text make
// an error one that repeats, when nothing else tells.
const repeatAfter = 3

// IsRepeating reports whether err will recur on every retry until
// something outside the watcher changes: a server error about the data or
// the query (a document or reply too large, bad BSON, a bad value), a
// permission refused, or a reply the driver refuses as too large. Network
// errors, timeouts and cancellations are transient.
func IsRepeating(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	msg := err.Error()
	for _, t := range repeatingTexts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return false
	}
	for _, c := range repeatingCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}

// failure is the failure that keeps the watcher from being ready: its
// error's text, since when it has been failing with it, how many times in
// a row, and whether it repeats.
type failure struct {
	text      string
	since     time.Time
	count     int
	repeating bool
}

// record takes one more failed attempt and returns the failure as it now
// stands: the same text again counts on (from repeatAfter on, an error
// that is neither a network error nor a timeout repeats), another one
// starts over.
func (f *failure) record(err error, now time.Time) failure {
	text := err.Error()
	if text != f.text {
		*f = failure{text: text, since: now}
	}
	f.count++
	f.repeating = IsRepeating(err) ||
		(f.count >= repeatAfter && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) && !serverSelection(err))
	return *f
}

// serverSelection reports whether err is the driver's failure to find a
// server: the server is down or unreachable, which passes.
func serverSelection(err error) bool {
	return strings.Contains(err.Error(), "server selection error")
}
