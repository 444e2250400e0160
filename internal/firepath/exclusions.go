package firepath

import "log/slog"

// excluded reports whether f's slot falls in a blackout window
// (RunnerOptions.Blackout) or on a date of a calendar its schedule
// excludes (RunnerOptions.Calendars), and then sets f.exclusion: its claim
// records the slot skipped, once across replicas (the record's _id
// decides, as for a run), without waiting for admission, and nothing runs.
func (r *Runner) excluded(f *fire) bool {
	slot := f.due.Slot.UTC()
	if r.opts.Blackout != nil {
		if x, ok := r.opts.Blackout(f.jobID(), f.due.Schedule.Category, slot); ok {
			f.exclusion = &x
			return true
		}
	}
	if r.opts.Calendars != nil && f.due.Schedule.Exclude != "" {
		if x, ok := r.opts.Calendars(f.due.Schedule, slot); ok {
			f.exclusion = &x
			return true
		}
	}
	return false
}

// skipReason is why f, recorded skipped by its claim, was (Hooks.Skipped).
func (f *fire) skipReason(a claimAnswer) string {
	switch {
	case f.exclusion != nil && f.exclusion.Calendar != "":
		return SkipCalendar
	case f.exclusion != nil:
		return SkipBlackout
	case a.MaxRunsReached:
		return SkipMaxRuns
	}
	return SkipOverlap
}

// logSkipped logs f, recorded skipped by its claim (answer a).
func (f *fire) logSkipped(log *slog.Logger, a claimAnswer) {
	switch x := f.exclusion; {
	case x != nil && x.Calendar != "":
		log.Info("fire skipped: on a date of a calendar it excludes", "calendar", x.Calendar, "reason", x.Reason)
	case x != nil:
		log.Info("fire skipped: inside a blackout window", "blackout_id", x.BlackoutID, "reason", x.Reason)
	case a.MaxRunsReached:
		log.Info("fire skipped: the job's run count reached its max_runs; the job ends", "reason", a.Reason,
			"max_runs", f.due.Schedule.MaxRuns)
	default:
		log.Info(f.kind.noun+" skipped", "reason", a.Reason, "holder", a.Holder, "holder_run_id", a.HolderRunID)
	}
}
