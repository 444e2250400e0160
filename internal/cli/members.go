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
	// FiringSince is when the member's engine began firing (null before).
	FiringSince *string `json:"firing_since"`
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
	// ArmedJobs counts the jobs whose timer the member arms
	// (members.ArmedCounts: its share when it divides the schedules,
	// every job otherwise; 0 when not live).
	ArmedJobs int `json:"armed_jobs"`
	// Divides is true when the member divides the schedules.
	Divides bool `json:"divides"`
	// HTTP is the address the member's HTTP listener is bound to ("" when
	// its daemon does not publish it).
	HTTP string `json:"http"`
}

func newMemberView(m members.Member, now time.Time, owned, armed int) memberView {
	return memberView{
		InstanceID: m.ID, Host: m.Host, PID: m.PID, Incarnation: m.Incarnation,
		StartedAt: jsonTime(m.StartedAt, nil), FiringSince: jsonTime(m.FiringSince, nil),
		HeartbeatAt: jsonTime(m.HeartbeatAt, nil), LeaseUntil: jsonTime(m.LeaseUntil, nil),
		HeartbeatAgeSeconds: now.Sub(m.HeartbeatAt).Seconds(), LeaseLeftSeconds: m.LeaseUntil.Sub(now).Seconds(),
		Live: m.LiveAt(now), OwnedJobs: owned, ArmedJobs: armed, Divides: m.Divides, HTTP: m.HTTP,
	}
}

func memberRow(v memberView) []string {
	lease := (time.Duration(v.LeaseLeftSeconds * float64(time.Second))).Round(100 * time.Millisecond).String()
	owned, armed := strconv.Itoa(v.OwnedJobs), strconv.Itoa(v.ArmedJobs)
	if !v.Live {
		lease = "passed " + (time.Duration(-v.LeaseLeftSeconds * float64(time.Second))).Round(time.Second).String() + " ago"
		owned, armed = "-", "-"
	}
	return []string{v.InstanceID, v.Host, strconv.Itoa(v.PID), v.Incarnation,
		(time.Duration(v.HeartbeatAgeSeconds * float64(time.Second))).Round(100 * time.Millisecond).String(), lease, owned, armed, v.HTTP}
}

func membersCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "members",
		Usage: "show the replicas registered in members",
		Subcommands: []*ucli.Command{{
			Name: "list",
			Usage: "list the members: instance, host, incarnation, heartbeat age, lease left, the jobs " +
				"each live member owns (rendezvous hashing over the live members) and those whose timer it arms",
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
					live := members.Live(all, now)
					owned, armed := members.OwnedCounts(ids, live), members.ArmedCounts(ids, live)
					views := make([]memberView, len(all))
					rows := make([][]string, len(all))
					for i, m := range all {
						n, a := 0, 0
						if m.LiveAt(now) {
							n, a = owned[m.ID], armed[m.ID]
						}
						views[i] = newMemberView(m, now, n, a)
						rows[i] = memberRow(views[i])
					}
					if isJSON(c) {
						return writeJSON(c.App.Writer, views)
					}
					table(c.App.Writer, []string{"INSTANCE", "HOST", "PID", "INCARNATION", "HEARTBEAT AGE", "LEASE LEFT", "OWNED JOBS",
						"ARMED JOBS", "HTTP"}, rows)
					return nil
				})
			},
		}},
	}
}
