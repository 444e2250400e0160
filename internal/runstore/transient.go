package runstore

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Backoff between tries of a step whose outcome was lost.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = 500 * time.Millisecond
)

// splitBulkError splits the error of an InsertMany or BulkWrite into the
// write errors by index and a whole-command error (the command failed or
// its answer was lost, or a write concern error: no write's outcome is
// known then).
func splitBulkError(err error) (map[int]mongo.WriteError, error) {
	if err == nil {
		return nil, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return nil, err
	}
	if bwe.WriteConcernError != nil {
		return nil, err
	}
	perOp := make(map[int]mongo.WriteError, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		perOp[we.Index] = we.WriteError
	}
	return perOp, nil
}

// insertSplit is the outcome of an unordered insertMany of the records of
// the fires todo (same order), as splitInserts sorts it.
type insertSplit struct {
	// inserted: the record is this request's.
	inserted []int
	// look: the outcome is to be read back — the whole request failed or
	// its answer was lost (whole is set), or the record's insert met a
	// duplicate key or a transient error (last is the last such error).
	look []int
	// refused: the server refused the record's insert, with its error.
	refused map[int]mongo.WriteError
	whole   error
	last    error
}

// splitInserts sorts the fires todo by the outcome err of their records'
// insertMany.
func splitInserts(todo []int, err error) insertSplit {
	perOp, whole := splitBulkError(err)
	sp := insertSplit{whole: whole, last: whole}
	for k, i := range todo {
		we, failed := perOp[k]
		switch {
		case whole != nil:
			sp.look = append(sp.look, i)
		case !failed:
			sp.inserted = append(sp.inserted, i)
		case we.Code == 11000 || transientCode(we.Code):
			sp.last = we
			sp.look = append(sp.look, i)
		default:
			if sp.refused == nil {
				sp.refused = map[int]mongo.WriteError{}
			}
			sp.refused[i] = we
		}
	}
	return sp
}

// Server error codes whose command may or may not have been applied, or
// that a later try may pass: a step-down, a shutdown, a time limit.
var transientCodes = map[int]bool{
	6: true, 7: true, 89: true, 91: true, 189: true, 262: true, 9001: true, 50: true,
	10107: true, 11600: true, 11602: true, 13435: true, 13436: true, 64: true, 112: true,
}

func transientCode(code int) bool { return transientCodes[code] }

// transient reports whether err leaves the outcome of a write unknown or
// may pass when tried again: the server was not reached or its answer was
// lost, it stepped down or shut down, or a write concern error.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, mongo.ErrClientDisconnected) {
		return true
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError != nil {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		if se.HasErrorLabel("RetryableWriteError") || se.HasErrorLabel("NetworkError") {
			return true
		}
		for code := range transientCodes {
			if se.HasErrorCode(code) {
				return true
			}
		}
		return false
	}
	// Server selection failures and other client-side errors without a
	// server's answer.
	return true
}

// retrying runs op until it succeeds, fails with an error that is not
// transient, or ctx ends; it returns the last error.
func retrying(ctx context.Context, op func() error) error {
	wait := retryFirst
	for {
		err := op()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if !sleepCtx(ctx, wait) {
			return err
		}
		wait = min(2*wait, retryMax)
	}
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
