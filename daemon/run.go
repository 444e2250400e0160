package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/schedule"
)

// What Run starts, in order, and how it stops them: the background writers
// first and last (indexes, edit history, the triggers stream), then the
// membership, and once this process holds its instance id the watchers, the
// engine, the relay and the catch-up.

// startBackground starts what runs for Run's whole length: the job_runs
// indexes, the edit-history writer (stopped after the watcher: no entry
// comes after it) and the triggers stream (stopped after the runner's
// shutdown). stop stops them in the reverse order.
func (s *Service) startBackground() (stop func()) {
	indexCtx, stopIndexes := context.WithCancel(context.Background())
	go ensureRunIndexes(indexCtx, s.db.Collection(record.RunsCollection), s.log)
	stopHistory := s.history.run(s.log)
	stopTriggers := s.triggers.start(s.synced)
	return func() {
		stopTriggers()
		stopHistory()
		stopIndexes()
	}
}

func (s *Service) logStarted() {
	attrs := []any{"database", s.db.Name(), "watch_mode", s.watcher.Status().Mode, "actions", s.registry.Names(),
		"incarnation", s.members.Self().Incarnation}
	for _, a := range s.opts.StartedLogAttrs {
		attrs = append(attrs, a)
	}
	s.log.Info("cronswap started", attrs...)
}

// parts are the goroutines Run starts and the means to stop them.
type parts struct {
	s *Service

	stopMember context.CancelFunc
	joined     chan struct{} // closed once this process holds its instance id
	memberDone chan error

	stopWatch     context.CancelFunc
	watchDone     chan error
	blackoutsDone <-chan struct{}
	calendarsDone <-chan struct{}
	starterDone   chan struct{}
	relayStarted  chan func()
	catchUpDone   chan struct{}
	// engineStarted is closed once startEngine returned (the engine
	// started, or the run ended first); divideDone once runDivide ended.
	engineStarted chan struct{}
	divideDone    chan struct{}
}

// startParts joins the members and starts the parts that wait for it.
// Nothing is read or fired before this process holds its instance id: a
// second live process with the same id is refused by Join. The one
// exception is a database that cannot be reached yet: then the watchers
// start too, so that they retry, log their reconnects and answer /readyz
// as ever, while the engine still waits for the join.
func (s *Service) startParts() *parts {
	p := &parts{s: s, joined: make(chan struct{}), memberDone: make(chan error, 1), watchDone: make(chan error, 1),
		starterDone: make(chan struct{}), relayStarted: make(chan func(), 1), catchUpDone: make(chan struct{}),
		engineStarted: make(chan struct{}), divideDone: make(chan struct{})}
	memberCtx, stopMember := context.WithCancel(context.Background())
	p.stopMember = stopMember
	go func() {
		if err := s.members.Join(memberCtx); err != nil {
			p.memberDone <- err
			return
		}
		close(p.joined)
		p.memberDone <- s.members.Run(memberCtx)
	}()

	watchCtx, stopWatch := context.WithCancel(context.Background())
	p.stopWatch = stopWatch
	go func() {
		select {
		case <-p.joined:
		case <-s.away:
		case <-watchCtx.Done():
			p.watchDone <- nil
			return
		}
		p.watchDone <- s.watcher.Run(watchCtx)
	}()
	p.blackoutsDone = s.blackouts.start(watchCtx, p.joined, s.away)
	p.calendarsDone = s.calendars.start(watchCtx, p.joined, s.away)
	go func() {
		defer close(p.starterDone)
		readDecided := s.startEngine(watchCtx, p.joined)
		close(p.engineStarted)
		readDecided() // while the engine fires
	}()
	go func() {
		defer close(p.divideDone)
		<-p.engineStarted
		var confirm sync.WaitGroup
		confirm.Go(func() { s.confirmVouchers(watchCtx, s.decided.firingAt) })
		s.runDivide(watchCtx) // with DivideSchedules: re-divide as the live members change
		confirm.Wait()
	}()
	go func() {
		// Notifications are delivered once this process holds its id.
		select {
		case <-p.joined:
			p.relayStarted <- s.runRelay()
		case <-watchCtx.Done():
			p.relayStarted <- func() {}
		}
	}()
	go func() {
		defer close(p.catchUpDone)
		ready := func() bool {
			return p.isJoined() && s.watcher.Status().Ready && s.blackouts.ready() && s.calendars.ready()
		}
		runCatchUp(watchCtx, s.engine, ready, s.catchupAnywhere(), s.catchupFor,
			func(due schedule.Due) { s.runner.FireCatchUp(due, s.catchupFor(due.Schedule.ActionName())) },
			s.log, s.recordStartupGaps)
	}()
	return p
}

func (p *parts) isJoined() bool { return closed(p.joined) }

// wait returns when ctx ends (nil) or a part fails: the watcher, or the
// membership (refused: another live process has this instance id, or taken
// over by one).
func (p *parts) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-p.watchDone:
		p.watchDone <- nil
		return err
	case err := <-p.memberDone:
		p.memberDone <- nil
		return err
	}
}

// shutdown stops the parts in order and returns runErr, or the first
// failure met while stopping.
func (s *Service) shutdown(p *parts, runErr error) error {
	s.log.Info("shutting down", "grace", s.opts.ShutdownGrace)
	p.stopWatch()
	<-p.starterDone // the engine is not started after this point
	s.engine.Stop()
	if !s.runner.Shutdown(s.opts.ShutdownGrace) {
		s.log.Warn("some actions were cancelled at the end of the grace period")
	}
	<-p.catchUpDone
	<-p.divideDone
	<-p.blackoutsDone
	<-p.calendarsDone
	// After the last ends were written: their notices are moved (and
	// delivered) here when there is time, else by another replica.
	(<-p.relayStarted)()
	if err := <-p.watchDone; err != nil && runErr == nil {
		runErr = err
	}
	p.stopMember()
	// After stopMember an error is the cancellation itself, unless another
	// process took the instance id meanwhile.
	if err := <-p.memberDone; runErr == nil && members.IsDuplicate(err) {
		runErr = err
	}
	// Removing the document (when this process holds it) shows the others
	// at once that this member is gone.
	if p.isJoined() {
		lctx, cancelLeave := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelLeave()
		if err := s.members.Leave(lctx); err != nil {
			s.log.Warn("leaving the members", "error", err)
		}
	}
	// Open event streams end here, not when the program's HTTP server
	// shuts down (it may outlive the service).
	s.events.Close()
	return runErr
}

// startEngine starts the engine's timers once the watcher has made it equal
// to the collection (filling a running engine costs robfig a re-sort per
// job, about 6x slower at 100,000 jobs; an empty engine has nothing to fire
// meanwhile), the blackout windows and the calendars are read and this process holds its
// instance id (joined is closed). It returns the start-up read of the
// decided slots (readDecided), to be run once the engine fires; without
// starting the engine, and a read that does nothing, when ctx ends first.
func (s *Service) startEngine(ctx context.Context, joined <-chan struct{}) (readDecided func()) {
	for _, ready := range []<-chan struct{}{joined, s.synced, s.blackouts.synced, s.calendars.synced} {
		select {
		case <-ready:
		case <-ctx.Done():
			return func() {}
		}
	}
	// What was decided before this engine fires is read while it fires
	// (at or before a slot it cannot have claimed, see planDecided), so
	// that the start-up gaps are the real ones and the first fires do not
	// wait for a read that, at a million jobs on a busy server, takes
	// longer than a slot.
	firingAt := time.Now()
	ids, notAfter := s.planDecided(firingAt)
	s.decided.firingAt = firingAt
	s.engine.Start()
	close(s.firing)
	// The others may now leave this engine's jobs out of their start-up
	// reads (planDecided): it fires them from here on.
	fctx, cancel := context.WithTimeout(ctx, s.members.Heartbeat())
	defer cancel()
	if err := s.members.Firing(fctx, firingAt); err != nil {
		s.log.Warn("could not record in the members that this engine fires", "collection", members.CollectionName, "error", err)
	}
	return func() { s.readDecided(ctx, ids, notAfter) }
}

// status is the /api/status view of this instance.
func (s *Service) status() httpapi.Status {
	ws := s.watcher.Status()
	return httpapi.Status{
		InstanceID:     s.opts.InstanceID,
		WatchMode:      string(ws.Mode),
		LastEventAt:    timePtr(ws.LastEventAt),
		TokenSavedAt:   timePtr(ws.TokenSavedAt),
		FullReloads:    ws.FullReloads,
		SchedulesArmed: s.engine.Len(),
		Ready:          ws.Ready,
		Reconnects:     ws.Reconnects,
		Readiness:      readiness(ws, time.Now()),
	}
}

// readiness says why the watcher is not ready, from its status at now:
// the full read under way, the error it keeps retrying, or that it has
// not begun; empty while it is ready.
func readiness(ws changestream.Status, now time.Time) httpapi.Readiness {
	if ws.Ready {
		return httpapi.Readiness{}
	}
	var r httpapi.Readiness
	var why []string
	if p := ws.Reload; p.Reason != "" {
		took := now.Sub(p.StartedAt)
		r.Reload = &httpapi.Reload{Reason: p.Reason, StartedAt: p.StartedAt, Documents: p.Documents, Bytes: p.Bytes}
		if took > 0 {
			r.Reload.DocumentsPerSecond = int64(float64(p.Documents) / took.Seconds())
		}
		what := "full reload (" + p.Reason + ")"
		if p.Reason == changestream.ReasonStateFile {
			what = "arming from the state file"
		}
		why = append(why, fmt.Sprintf("%s under way: %d documents (%.1f MB) read in %s, %d a second",
			what, p.Documents, float64(p.Bytes)/1e6, took.Round(100*time.Millisecond), r.Reload.DocumentsPerSecond))
	}
	if ws.LastError != "" {
		r.LastError, r.ErrorSince, r.ErrorRepeats = ws.LastError, timePtr(ws.ErrorSince), ws.Repeating
		kind := "failing"
		if ws.Repeating {
			kind = "failing with the same error, which will recur until the collection, the server or the configuration changes,"
		}
		why = append(why, fmt.Sprintf("the watcher has been %s since %s: %s",
			kind, ws.ErrorSince.UTC().Format(time.RFC3339), ws.LastError))
	}
	if len(why) == 0 {
		why = append(why, "starting: the schedules are not read yet")
	}
	r.NotReady = strings.Join(why, "; ")
	return r
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
