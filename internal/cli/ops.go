package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/jobs"
)

// lockView is one lock as `locks list -o json` shows it: the fields of
// jobs.LockDoc, with null for times never set.
type lockView struct {
	JobID       string  `json:"job_id"`
	State       string  `json:"state"`
	Holder      string  `json:"holder"`
	RunID       string  `json:"run_id"`
	Fence       int64   `json:"fence"`
	AcquiredAt  *string `json:"acquired_at"`
	LeaseUntil  *string `json:"lease_until"`
	LastSlot    *string `json:"last_slot"`
	LastOutcome string  `json:"last_outcome"`
	LastEndedAt *string `json:"last_ended_at"`
	UpdatedAt   *string `json:"updated_at"`
	// Expired is true when the lock is held but its lease has passed: any
	// replica may take it over.
	Expired bool `json:"expired"`
}

func newLockView(l jobs.LockDoc, now time.Time) lockView {
	return lockView{
		JobID: l.JobID, State: l.State, Holder: l.Holder, RunID: l.RunID, Fence: l.Fence,
		AcquiredAt: jsonTime(l.AcquiredAt, nil), LeaseUntil: jsonTime(l.LeaseUntil, nil),
		LastSlot: jsonTime(l.LastSlot, nil), LastOutcome: l.LastOutcome,
		LastEndedAt: jsonTime(l.LastEndedAt, nil), UpdatedAt: jsonTime(l.UpdatedAt, nil),
		Expired: l.State == jobs.LockRunning && !l.LeaseUntil.IsZero() && l.LeaseUntil.Before(now),
	}
}

func lockRow(l lockView) []string {
	state := l.State
	if l.Expired {
		state += " (lease expired)"
	}
	return []string{l.JobID, state, l.Holder, l.RunID, strconv.FormatInt(l.Fence, 10),
		deref(l.LeaseUntil), deref(l.LastSlot), l.LastOutcome}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// runView is one run record as `runs list -o json` shows it: the fields of
// jobs.RunDoc, with null for times never set.
type runView struct {
	RunID       string  `json:"run_id"`
	JobID       string  `json:"job_id"`
	ScheduledAt *string `json:"scheduled_at"`
	Instance    string  `json:"instance"`
	Fence       int64   `json:"fence"`
	Status      string  `json:"status"`
	StartedAt   *string `json:"started_at"`
	EndedAt     *string `json:"ended_at"`
	Error       string  `json:"error"`
	ExitCode    *int    `json:"exit_code"`
	Stderr      string  `json:"stderr"`
}

func newRunView(r jobs.RunDoc) runView {
	return runView{
		RunID: r.ID, JobID: r.JobID, ScheduledAt: jsonTime(r.ScheduledAt, nil), Instance: r.Instance,
		Fence: r.Fence, Status: r.Status, StartedAt: jsonTime(r.StartedAt, nil), EndedAt: jsonTime(r.EndedAt, nil),
		Error: r.Error, ExitCode: r.ExitCode, Stderr: r.Stderr,
	}
}

func lockHeader() []string {
	return []string{"JOB", "STATE", "HOLDER", "RUN ID", "FENCE", "LEASE UNTIL", "LAST SLOT", "LAST OUTCOME"}
}

func locksCommand(stdin io.Reader) *ucli.Command {
	return &ucli.Command{
		Name:  "locks",
		Usage: "show the per-job locks, or force one free",
		Subcommands: []*ucli.Command{
			{
				Name:  "list",
				Usage: "list the locks of job_locks",
				Flags: dbFlags(),
				Action: func(c *ucli.Context) error {
					return withDB(c, func(ctx context.Context, s *session) error {
						locks, err := s.store.Locks(ctx)
						if err != nil {
							return s.fail(err)
						}
						now := time.Now()
						views := make([]lockView, len(locks))
						rows := make([][]string, len(locks))
						for i, l := range locks {
							views[i] = newLockView(l, now)
							rows[i] = lockRow(views[i])
						}
						if isJSON(c) {
							return writeJSON(c.App.Writer, views)
						}
						table(c.App.Writer, lockHeader(), rows)
						return nil
					})
				},
			},
			{
				Name:      "release",
				Usage:     "force a held lock free (operator override; the holder stops on its next renewal); asks first unless --yes",
				ArgsUsage: "ID",
				Flags:     dbFlags(&ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"}),
				Action: func(c *ucli.Context) error {
					id, err := oneID(c, "cronswap locks release daily_report --yes")
					if err != nil {
						return err
					}
					return withDB(c, func(ctx context.Context, s *session) error {
						return releaseLock(ctx, c, s, id, stdin)
					})
				},
			},
		},
	}
}

func releaseLock(ctx context.Context, c *ucli.Context, s *session, id string, stdin io.Reader) error {
	report := func(released bool, msg string) error {
		if isJSON(c) {
			return writeJSON(c.App.Writer, map[string]any{"job_id": id, "released": released, "message": msg})
		}
		fmt.Fprintln(c.App.Writer, msg)
		return nil
	}
	l, err := s.store.Lock(ctx, id)
	if errors.Is(err, admin.ErrNotFound) {
		return ucli.Exit(fmt.Sprintf("no lock for job %q (it never ran here)", id), ExitUserError)
	}
	if err != nil {
		return s.fail(err)
	}
	if l.State != jobs.LockRunning {
		return report(false, fmt.Sprintf("lock of %s is not held (state %s); nothing to release", id, l.State))
	}
	if !c.Bool("yes") {
		fmt.Fprintf(c.App.ErrWriter, "release the lock of %s held by %s (run %s, fence %d, lease until %s)? The running job is told to stop at its next renewal. [y/N] ",
			id, l.Holder, l.RunID, l.Fence, rfc3339(l.LeaseUntil, nil))
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return ucli.Exit("not released (answer y to confirm, or pass --yes)", ExitUserError)
		}
	}
	err = s.store.ReleaseLock(ctx, id, l.Fence)
	if errors.Is(err, admin.ErrLockChanged) {
		return ucli.Exit(fmt.Sprintf("lock of %s changed since it was read (released or taken again); nothing done, look again with `cronswap locks list`", id), ExitUserError)
	}
	if err != nil {
		return s.fail(err)
	}
	return report(true, fmt.Sprintf("released the lock of %s (was held by %s, fence %d)", id, l.Holder, l.Fence))
}

func runsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "runs",
		Usage: "show run records (job_runs)",
		Subcommands: []*ucli.Command{{
			Name:  "list",
			Usage: "list runs, newest first",
			Flags: dbFlags(
				&ucli.StringFlag{Name: "job", Usage: "only this job's runs"},
				&ucli.IntFlag{Name: "limit", Value: 20, Usage: "at most this many"},
			),
			Action: func(c *ucli.Context) error {
				if n := c.Int("limit"); n < 1 {
					return ucli.Exit(fmt.Sprintf("--limit %d: want at least 1", n), ExitUserError)
				}
				return withDB(c, func(ctx context.Context, s *session) error {
					runs, err := s.store.Runs(ctx, c.String("job"), int64(c.Int("limit")))
					if err != nil {
						return s.fail(err)
					}
					if isJSON(c) {
						views := make([]runView, len(runs))
						for i, r := range runs {
							views[i] = newRunView(r)
						}
						return writeJSON(c.App.Writer, views)
					}
					rows := make([][]string, len(runs))
					for i, r := range runs {
						dur := ""
						if !r.EndedAt.IsZero() && !r.StartedAt.IsZero() {
							dur = r.EndedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
						}
						rows[i] = []string{r.JobID, rfc3339(r.ScheduledAt, nil), r.Status, r.Instance,
							rfc3339(r.StartedAt, nil), dur, strconv.FormatInt(r.Fence, 10), r.ID, r.Error}
					}
					table(c.App.Writer, []string{"JOB", "SCHEDULED AT", "STATUS", "INSTANCE", "STARTED", "TOOK", "FENCE", "RUN ID", "ERROR"}, rows)
					return nil
				})
			},
		}},
	}
}

// tokenView is one resume token as `token show` prints it.
type tokenView struct {
	ID        string          `json:"id"`
	UpdatedAt *string         `json:"updated_at"`
	Token     json.RawMessage `json:"token"`
}

func tokenCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "token",
		Usage: "show or reset the stored change-stream resume tokens",
		Subcommands: []*ucli.Command{
			{
				Name:  "show",
				Usage: "show the stored resume tokens (one per daemon instance)",
				Flags: dbFlags(&ucli.StringFlag{Name: "id", Usage: "only this instance's token"}),
				Action: func(c *ucli.Context) error {
					return withDB(c, func(ctx context.Context, s *session) error {
						toks, err := s.store.Tokens(ctx, c.String("id"))
						if err != nil {
							return s.fail(err)
						}
						views := make([]tokenView, len(toks))
						rows := make([][]string, len(toks))
						for i, t := range toks {
							js := json.RawMessage("null")
							if t.Token != nil {
								if b, err := bson.MarshalExtJSON(t.Token, false, false); err == nil {
									js = b
								}
							}
							views[i] = tokenView{ID: t.ID, UpdatedAt: jsonTime(t.UpdatedAt, time.UTC), Token: js}
							rows[i] = []string{t.ID, rfc3339(t.UpdatedAt, nil), string(js)}
						}
						if isJSON(c) {
							return writeJSON(c.App.Writer, views)
						}
						table(c.App.Writer, []string{"INSTANCE", "UPDATED AT", "TOKEN"}, rows)
						return nil
					})
				},
			},
			{
				Name:  "reset",
				Usage: "delete a stored resume token: that instance does a full reload on its next start",
				Flags: dbFlags(
					&ucli.StringFlag{Name: "id", Usage: "instance whose token to delete (default: this config's instance_id / CRONSWAP_INSTANCE_ID)"},
					&ucli.BoolFlag{Name: "all", Usage: "delete every instance's token"},
				),
				Action: func(c *ucli.Context) error {
					if c.Bool("all") && c.IsSet("id") {
						return ucli.Exit("give --id or --all, not both", ExitUserError)
					}
					return withDB(c, func(ctx context.Context, s *session) error {
						id := c.String("id")
						if id == "" && !c.Bool("all") {
							id = s.cfg.InstanceID
						}
						n, err := s.store.ResetTokens(ctx, id)
						if err != nil {
							return s.fail(err)
						}
						if isJSON(c) {
							return writeJSON(c.App.Writer, map[string]any{"id": id, "all": c.Bool("all"), "deleted": n})
						}
						switch {
						case c.Bool("all"):
							fmt.Fprintf(c.App.Writer, "deleted %d resume token(s); every instance does a full reload on its next start\n", n)
						case n == 0:
							fmt.Fprintf(c.App.Writer, "no resume token stored for %s; nothing to reset\n", id)
						default:
							fmt.Fprintf(c.App.Writer, "deleted the resume token of %s; it does a full reload on its next start\n", id)
						}
						return nil
					})
				},
			},
		},
	}
}

// bashCompletion is the bash script that asks the binary for completions
// (urfave/cli's --generate-bash-completion protocol).
const bashCompletion = `# cronswap bash completion: source <(cronswap completion bash)
_cronswap_complete() {
  local cur words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == -* ]]; then
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _cronswap_complete cronswap
`

// zshPreamble lets zsh use the bash script.
const zshPreamble = `# cronswap zsh completion: source <(cronswap completion zsh)
autoload -U +X compinit && compinit
autoload -U +X bashcompinit && bashcompinit
`

func completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(cronswap completion bash)",
		ArgsUsage: "bash|zsh",
		Flags:     commonFlags(),
		Action: func(c *ucli.Context) error {
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshPreamble+bashCompletion)
			default:
				return ucli.Exit(fmt.Sprintf("completion %q: want bash or zsh", c.Args().First()), ExitUserError)
			}
			return nil
		},
	}
}
