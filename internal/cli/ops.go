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
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/record"
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
	// Waiting is the number of fires waiting on the lock (overlap
	// buffer_one, buffer_all, cancel_other), Next the first of them.
	Waiting int                 `json:"waiting"`
	Next    *record.WaitingFire `json:"next_waiting,omitempty"`
	// Cancel is a pending cancel_other request: the run asked to stop and
	// the run replacing it.
	Cancel *cancelView `json:"cancel,omitempty"`
}

// cancelView is a pending cancel request on a lock.
type cancelView struct {
	RunID string `json:"run_id"`
	By    string `json:"by"`
}

func newLockView(l record.LockDoc, now time.Time) lockView {
	v := lockView{
		JobID: l.JobID, State: l.State, Holder: l.Holder, RunID: l.RunID, Fence: l.Fence,
		AcquiredAt: jsonTime(l.AcquiredAt, nil), LeaseUntil: jsonTime(l.LeaseUntil, nil),
		LastSlot: jsonTime(l.LastSlot, nil), LastOutcome: l.LastOutcome,
		LastEndedAt: jsonTime(l.LastEndedAt, nil), UpdatedAt: jsonTime(l.UpdatedAt, nil),
		Expired: l.State == record.LockRunning && !l.LeaseUntil.IsZero() && l.LeaseUntil.Before(now),
	}
	v.Waiting, v.Next = l.Waiting()
	if run, by := l.PendingCancel(); run != "" {
		v.Cancel = &cancelView{RunID: run, By: by}
	}
	return v
}

// waitingCell is the WAITING column: how many fires wait, and the next.
func waitingCell(l lockView) string {
	switch {
	case l.Waiting == 0:
		return ""
	case l.Next == nil:
		return strconv.Itoa(l.Waiting)
	}
	return fmt.Sprintf("%d, next %s", l.Waiting, l.Next.RunID)
}

// cancelCell is the CANCEL column: the run asked to stop, and by which.
func cancelCell(l lockView) string {
	if l.Cancel == nil {
		return ""
	}
	return l.Cancel.RunID + " by " + l.Cancel.By
}

func lockRow(l lockView) []string {
	state := l.State
	if l.Expired {
		state += " (lease expired)"
	}
	return []string{l.JobID, state, l.Holder, l.RunID, strconv.FormatInt(l.Fence, 10),
		deref(l.LeaseUntil), deref(l.LastSlot), l.LastOutcome, waitingCell(l), cancelCell(l)}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// runView is one run record as `runs list -o json` and `runs get -o json`
// show it: the fields of jobs.RunDoc, with null for times never set.
type runView struct {
	RunID       string  `json:"run_id"`
	JobID       string  `json:"job_id"`
	ScheduledAt *string `json:"scheduled_at"`
	Instance    string  `json:"instance"`
	Fence       int64   `json:"fence"`
	Status      string  `json:"status"`
	StartedAt   *string `json:"started_at"`
	EndedAt     *string `json:"ended_at"`
	LeaseUntil  *string `json:"lease_until"`
	Error       string  `json:"error"`
	ExitCode    *int    `json:"exit_code"`
	// Stdout and Stderr are the tails of what an exec action printed.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// AnswerStatus and Answer are an http action's answer: its status and
	// the first bytes of its body; left out when there was none.
	AnswerStatus int    `json:"answer_status,omitempty"`
	Answer       string `json:"answer,omitempty"`
	// The fields of a missed record (status missed), left out otherwise:
	// the range's last slot, its number of slots, why they did not run
	// and when the record was written.
	LastScheduledAt *string `json:"last_scheduled_at,omitempty"`
	Count           int64   `json:"count,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	RecordedAt      *string `json:"recorded_at,omitempty"`
	// BlackoutID names the blackout window that skipped the slot.
	BlackoutID string `json:"blackout_id,omitempty"`
	// Attempt, Attempts and RetryAt are set for an action that retries:
	// the current attempt, every ended one, and (status retrying) when
	// the next is due.
	Attempt  int                 `json:"attempt,omitempty"`
	Attempts []record.AttemptDoc `json:"attempts,omitempty"`
	RetryAt  *string             `json:"retry_at,omitempty"`
}

func newRunView(r record.RunDoc) runView {
	return runView{
		RunID: r.ID, JobID: r.JobID, ScheduledAt: jsonTime(r.ScheduledAt, nil), Instance: r.Instance,
		Fence: r.Fence, Status: r.Status, StartedAt: jsonTime(r.StartedAt, nil), EndedAt: jsonTime(r.EndedAt, nil),
		LeaseUntil: jsonTime(r.LeaseUntil, nil), Error: r.Error, ExitCode: r.ExitCode, Stdout: r.Stdout, Stderr: r.Stderr,
		AnswerStatus: r.AnswerStatus, Answer: r.Answer,
		LastScheduledAt: jsonTime(r.LastScheduledAt, nil), Count: r.Count, Reason: r.Reason,
		RecordedAt: jsonTime(r.RecordedAt, nil), BlackoutID: r.BlackoutID,
		Attempt: r.Attempt, Attempts: r.Attempts, RetryAt: jsonTime(r.RetryAt, nil),
	}
}

// runNote is the ERROR column of `runs list`: the run's error, or for a
// missed record its reason and, for a range, how many slots up to which.
func runNote(r record.RunDoc) string {
	if r.Status != record.StatusMissed {
		return r.Error
	}
	note := r.Reason
	if r.Count > 1 {
		note = fmt.Sprintf("%s: %d slots, %s .. %s", r.Reason, r.Count, rfc3339(r.ScheduledAt, nil), rfc3339(r.LastScheduledAt, nil))
	}
	if r.Error != "" {
		note += " (" + r.Error + ")"
	}
	return note
}

// runTook is how long a finished run took ("" while running or skipped).
func runTook(r record.RunDoc) string {
	if r.EndedAt.IsZero() || r.StartedAt.IsZero() {
		return ""
	}
	return r.EndedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
}

// stdoutCellWidth bounds the STDOUT column of `runs list`: enough for a
// status line, short enough to keep the table readable.
const stdoutCellWidth = 40

// lastLine returns the last non-empty line of s, cut to its last width
// characters (marked with a leading "..." when cut).
func lastLine(s string, width int) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > width {
		return "..." + string(r[len(r)-(width-3):])
	}
	return s
}

func lockHeader() []string {
	return []string{"JOB", "STATE", "HOLDER", "RUN ID", "FENCE", "LEASE UNTIL", "LAST SLOT", "LAST OUTCOME", "WAITING", "CANCEL"}
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
	if l.State != record.LockRunning {
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
	if errors.Is(err, record.ErrLockChanged) {
		return ucli.Exit(fmt.Sprintf("lock of %s changed since it was read (released or taken again); nothing done, look again with `cronswap locks list`", id), ExitUserError)
	}
	if err != nil {
		return s.fail(err)
	}
	return report(true, fmt.Sprintf("released the lock of %s (was held by %s, fence %d)", id, l.Holder, l.Fence))
}

func runsCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "runs",
		Usage:       "show run records (job_runs): runs, skips and missed slots",
		Subcommands: []*ucli.Command{runsList(), runsGet()},
	}
}

func runsList() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list runs, newest first (STDOUT: the last line of an exec action's output; runs get shows all of it)",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "job", Usage: "only this job's runs"},
			&ucli.IntFlag{Name: "limit", Value: 20, Usage: "at most this many"},
		),
		Action: func(c *ucli.Context) error {
			if n := c.Int("limit"); n < 1 {
				return ucli.Exit(fmt.Sprintf("--limit %d: want at least 1", n), ExitUserError)
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				job := c.String("job")
				runs, err := s.store.Runs(ctx, job, int64(c.Int("limit")))
				if err != nil {
					return s.fail(err)
				}
				if job != "" && len(runs) == 0 {
					// No records: say so when there is no such job either.
					_, err := s.store.Schedule(ctx, job)
					if notFound(err) {
						return ucli.Exit(fmt.Sprintf("no job %q: no schedule and no run records (records are kept for runs.retention after they end)", job), ExitUserError)
					}
					if err != nil {
						return s.fail(err)
					}
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
					rows[i] = []string{r.JobID, rfc3339(r.ScheduledAt, nil), r.Status, r.Instance,
						rfc3339(r.StartedAt, nil), runTook(r), strconv.FormatInt(r.Fence, 10), r.ID,
						lastLine(r.Stdout, stdoutCellWidth), runNote(r)}
				}
				table(c.App.Writer, []string{"JOB", "SCHEDULED AT", "STATUS", "INSTANCE", "STARTED", "TOOK", "FENCE", "RUN ID", "STDOUT", "ERROR"}, rows)
				return nil
			})
		},
	}
}

func runsGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show one run record in full, with the tails of its stdout and stderr (an http action: its answer)",
		ArgsUsage: "RUN_ID",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 || c.Args().First() == "" {
				return ucli.Exit("want exactly one run ID argument (the RUN ID column of `cronswap runs list`), e.g. cronswap runs get 4373965bd85bb8256244f7bd", ExitUserError)
			}
			id := c.Args().First()
			return withDB(c, func(ctx context.Context, s *session) error {
				r, err := s.store.Run(ctx, id)
				if notFound(err) {
					return ucli.Exit(fmt.Sprintf("no run %q in %s (records are kept for runs.retention after they end)", id, record.RunsCollection), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, newRunView(r))
				}
				writeRun(c.App.Writer, r)
				return nil
			})
		},
	}
}

// writeRun prints one run record: a field per line, then the output tails
// (and an http action's answer) verbatim, each line indented.
func writeRun(w io.Writer, r record.RunDoc) {
	fields := [][2]string{
		{"RUN ID", r.ID}, {"JOB", r.JobID}, {"SCHEDULED AT", rfc3339(r.ScheduledAt, nil)}, {"STATUS", r.Status},
		{"INSTANCE", r.Instance}, {"FENCE", strconv.FormatInt(r.Fence, 10)}, {"STARTED", rfc3339(r.StartedAt, nil)},
		{"ENDED", rfc3339(r.EndedAt, nil)}, {"TOOK", runTook(r)}, {"LEASE UNTIL", rfc3339(r.LeaseUntil, nil)},
	}
	// Only an action that has an exit code (exec) records one.
	if r.ExitCode != nil {
		fields = append(fields, [2]string{"EXIT CODE", strconv.Itoa(*r.ExitCode)})
	}
	// Only an http action that got an answer records one.
	if r.AnswerStatus != 0 {
		fields = append(fields, [2]string{"ANSWER STATUS", strconv.Itoa(r.AnswerStatus)})
	}
	fields = append(fields, [2]string{"ERROR", r.Error})
	if r.BlackoutID != "" {
		fields = append(fields, [][2]string{{"BLACKOUT", r.BlackoutID}, {"REASON", r.Reason}}...)
	}
	fields = append(fields, attemptFields(r)...)
	if r.Status == record.StatusMissed {
		fields = append(fields, [][2]string{{"REASON", r.Reason}, {"LAST SCHEDULED AT", rfc3339(r.LastScheduledAt, nil)},
			{"COUNT", strconv.FormatInt(r.Count, 10)}, {"RECORDED", rfc3339(r.RecordedAt, nil)}}...)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		v := strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(f[1])
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", f[0], v)
	}
	_ = tw.Flush()
	outputs := [][2]string{{"STDOUT", r.Stdout}, {"STDERR", r.Stderr}}
	if r.AnswerStatus != 0 {
		outputs = append(outputs, [2]string{"ANSWER", r.Answer})
	}
	for _, out := range outputs {
		if out[1] == "" {
			fmt.Fprintf(w, "%s: -\n", out[0])
			continue
		}
		fmt.Fprintf(w, "%s:\n", out[0])
		for _, line := range strings.Split(out[1], "\n") {
			fmt.Fprintln(w, "  "+strings.TrimRight(line, "\r"))
		}
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
		Flags:     ignoredCommonFlags(),
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
