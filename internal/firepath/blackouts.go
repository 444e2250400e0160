package firepath

// inBlackout reports whether f's slot falls in a blackout window
// (RunnerOptions.Blackout), and then sets f.blackout: its claim records the
// slot skipped, once across replicas (the record's _id decides, as for a
// run), without waiting for admission, and nothing runs.
func (r *Runner) inBlackout(f *fire) bool {
	if r.opts.Blackout == nil {
		return false
	}
	b, ok := r.opts.Blackout(f.jobID(), f.due.Schedule.Category, f.due.Slot.UTC())
	if !ok {
		return false
	}
	f.blackout = &b
	return true
}
