package metrics

// Results of the notifications_total counter.
const (
	NotificationDelivered = "delivered"
	NotificationFailed    = "failed"
	NotificationGivenUp   = "given_up"
)

// CountNotification counts one delivery attempt of a notification to sink:
// delivered, or failed (gaveUp: it was the last attempt).
func (m *Metrics) CountNotification(sink string, delivered, gaveUp bool) {
	if m == nil {
		return
	}
	result := NotificationFailed
	switch {
	case delivered:
		result = NotificationDelivered
	case gaveUp:
		result = NotificationGivenUp
	}
	m.Notifications.WithLabelValues(sink, result).Inc()
}
