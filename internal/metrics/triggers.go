package metrics

// CountTrigger counts one outcome (a request's status) written on a
// run-now or backfill request by this replica.
func (m *Metrics) CountTrigger(outcome string) {
	if m == nil {
		return
	}
	m.Triggers.WithLabelValues(outcome).Inc()
}
