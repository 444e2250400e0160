package cli

import (
	"context"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cronswap/cronswap/internal/members"
)

// memberView is one member as `members list -o json` shows it.
type memberView struct {
	InstanceID  string  `json:"instance_id"`
	Host        string  `json:"host"`
	PID         int     `json:"pid"`
	Incarnation string  `json:"incarnation"`
	StartedAt   *string `json:"started_at"`
	HeartbeatAt *string `json:"heartbeat_at"`
	LeaseUntil  *string `json:"lease_until"`
	// HeartbeatAgeSeconds is how long ago the last heartbeat was written.
	HeartbeatAgeSeconds float64 `json:"heartbeat_age_seconds"`
	// LeaseLeftSeconds is how long the member stays live without another
	// heartbeat; negative once the lease has passed.
	LeaseLeftSeconds float64 `json:"lease_left_seconds"`
	// Live is true while the lease has not passed.
	Live bool `json:"live"`
	// OwnedJobs counts the jobs (admin.Store.JobIDs: enabled or not)
	// whose rendezvous owner among the live members is this member
	// (members.OwnedCounts; 0 when not live).
	OwnedJobs int `json:"owned_jobs"`
	// HTTP is the address the member's HTTP listener is bound to ("" when
	// its daemon does not publish it).
	HTTP string `json:"http"`
}

func newMemberView(m members.Member, now time.Time, owned int) memberView {
	return memberView{
		InstanceID: m.ID, Host: m.Host, PID: m.PID, Incarnation: m.Incarnation,
		StartedAt: jsonTime(m.StartedAt, nil), HeartbeatAt: jsonTime(m.HeartbeatAt, nil), LeaseUntil: jsonTime(m.LeaseUntil, nil),
		HeartbeatAgeSeconds: now.Sub(m.HeartbeatAt).Seconds(), LeaseLeftSeconds: m.LeaseUntil.Sub(now).Seconds(),
		Live: m.LiveAt(now), OwnedJobs: owned, HTTP: m.HTTP,
	}
}

func memberRow(v memberView) []string {
	lease := (time.Duration(v.LeaseLeftSeconds * float64(time.Second))).Round(100 * time.Millisecond).String()
	owned := strconv.Itoa(v.OwnedJobs)
	if !v.Live {
		lease = "passed " + (time.Duration(-v.LeaseLeftSeconds * float64(time.Second))).Round(time.Second).String() + " ago"
		owned = "-"
	}
	return []string{v.InstanceID, v.Host, strconv.Itoa(v.PID), v.Incarnation,
		(time.Duration(v.HeartbeatAgeSeconds * float64(time.Second))).Round(100 * time.Millisecond).String(), lease, owned, v.HTTP}
}

func membersCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "members",
		Usage: "show the replicas registered in members",
		Subcommands: []*ucli.Command{{
			Name: "list",
			Usage: "list the members: instance, host, incarnation, heartbeat age, lease left and the jobs " +
				"each live member owns (rendezvous hashing over the live members)",
			Flags: dbFlags(),
			Action: func(c *ucli.Context) error {
				return withDB(c, func(ctx context.Context, s *session) error {
					all, now, err := s.store.Members(ctx)
					if err != nil {
						return s.fail(err)
					}
					ids, err := s.store.JobIDs(ctx)
					if err != nil {
						return s.fail(err)
					}
					owned := members.OwnedCounts(ids, members.Live(all, now))
					views := make([]memberView, len(all))
					rows := make([][]string, len(all))
					for i, m := range all {
						n := 0
						if m.LiveAt(now) {
							n = owned[m.ID]
						}
						views[i] = newMemberView(m, now, n)
						rows[i] = memberRow(views[i])
					}
					if isJSON(c) {
						return writeJSON(c.App.Writer, views)
					}
					table(c.App.Writer, []string{"INSTANCE", "HOST", "PID", "INCARNATION", "HEARTBEAT AGE", "LEASE LEFT", "OWNED JOBS", "HTTP"}, rows)
					return nil
				})
			},
		}},
	}
}
