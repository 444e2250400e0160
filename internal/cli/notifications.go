package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/notify"
)

// notificationView is one notification as `notifications list -o json`
// shows it.
type notificationView struct {
	ID            string  `json:"notification_id"`
	Kind          string  `json:"kind"`
	JobID         string  `json:"job_id"`
	Sink          string  `json:"sink"`
	SourceID      string  `json:"source_id"`
	At            *string `json:"at"`
	Status        string  `json:"status"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt *string `json:"next_attempt_at"`
	LastAttemptAt *string `json:"last_attempt_at"`
	LastError     string  `json:"last_error,omitempty"`
	DeliveredAt   *string `json:"delivered_at"`
	CreatedAt     *string `json:"created_at"`
}

func newNotificationView(d notify.Doc) notificationView {
	v := notificationView{ID: d.ID, Kind: d.Kind, JobID: d.JobID, Sink: d.Sink, SourceID: d.SourceID, At: jsonTime(d.At, nil),
		Status: d.Status, Attempts: d.Attempts, LastAttemptAt: jsonTime(d.LastAttemptAt, nil), LastError: d.LastError,
		DeliveredAt: jsonTime(d.DeliveredAt, nil), CreatedAt: jsonTime(d.CreatedAt, nil)}
	if d.Status == notify.StatusPending {
		v.NextAttemptAt = jsonTime(d.NextAttemptAt, nil)
	}
	return v
}

func notificationRow(v notificationView, now time.Time) []string {
	at := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	next := "-"
	if v.NextAttemptAt != nil {
		if t, err := time.Parse(time.RFC3339Nano, *v.NextAttemptAt); err == nil {
			next = "in " + max(t.Sub(now), 0).Round(time.Second).String()
		}
	}
	errText := v.LastError
	if len(errText) > 80 {
		errText = errText[:77] + "..."
	}
	return []string{at(v.At), v.JobID, v.Kind, v.Sink, v.Status, strconv.Itoa(v.Attempts), next, errText}
}

func notificationsCommand() *ucli.Command {
	statuses := []string{notify.StatusPending, notify.StatusDelivered, notify.StatusFailed}
	return &ucli.Command{
		Name:  "notifications",
		Usage: "show the failure notifications in " + notify.CollectionName,
		Subcommands: []*ucli.Command{{
			Name: "list",
			Usage: "list notifications, newest first: event time, job, kind, sink, status, attempts, next attempt " +
				"and the last delivery error",
			Flags: dbFlags(
				&ucli.StringFlag{Name: "status", Usage: "only this status: " + strings.Join(statuses, ", ")},
				&ucli.BoolFlag{Name: "failing", Usage: "only those whose last delivery failed (given up, or pending with an error)"},
				&ucli.StringFlag{Name: "job", Usage: "only this job's (schedule id)"},
				&ucli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many"},
			),
			Action: func(c *ucli.Context) error {
				if st := c.String("status"); st != "" && !slices.Contains(statuses, st) {
					return ucli.Exit(fmt.Sprintf("--status %q: want one of %s", st, strings.Join(statuses, ", ")), ExitUserError)
				}
				if n := c.Int("limit"); n < 1 {
					return ucli.Exit(fmt.Sprintf("--limit %d: want at least 1", n), ExitUserError)
				}
				return withDB(c, func(ctx context.Context, s *session) error {
					docs, err := notify.List(ctx, notify.Collection(s.db), notify.ListFilter{Status: c.String("status"),
						JobID: c.String("job"), Failing: c.Bool("failing"), Limit: int64(c.Int("limit"))})
					if err != nil {
						return s.fail(err)
					}
					views := make([]notificationView, len(docs))
					rows := make([][]string, len(docs))
					now := time.Now()
					for i, d := range docs {
						views[i] = newNotificationView(d)
						rows[i] = notificationRow(views[i], now)
					}
					if isJSON(c) {
						return writeJSON(c.App.Writer, views)
					}
					table(c.App.Writer, []string{"AT", "JOB", "KIND", "SINK", "STATUS", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR"}, rows)
					return nil
				})
			},
		}},
	}
}
