package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/docfields"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// setExample is shown with every refusal of `schedules set`.
const setExample = `cronswap schedules set daily_report --cron "0 9 * * 1-5" --tz Asia/Seoul`

// scheduleView is one schedule as list/get show it.
type scheduleView struct {
	// ID is the job id, or for a document whose _id is not a job id
	// (InvalidID) a rendering of that _id.
	ID string `json:"id"`
	// InvalidID marks a document whose _id is not a job id: it is not a
	// job, has no runs, and is shown apart from the job whose id equals
	// its rendering.
	InvalidID bool            `json:"invalid_id,omitempty"`
	CronExpr  string          `json:"cron_expr"`
	Timezone  string          `json:"timezone"` // the document's; "" = the config's default
	DST       string          `json:"dst"`      // "shift" (the default) or "plain"; a refused document's as written when it is neither
	Enabled   bool            `json:"enabled"`  // absent: true; a refused document's non-boolean: false
	Job       string          `json:"job"`
	Category  string          `json:"category"`
	Args      json.RawMessage `json:"args"`
	UpdatedAt *string         `json:"updated_at"`
	// NextRun is the next run the live daemons have armed (CheckedBy), else
	// computed here from the expression; null when disabled or not armed.
	NextRun *string `json:"next_run"`
	// LastRun is the scheduled time of the job's last run (record.LastRun,
	// as the daemon's status page shows it); LastStatus its status.
	LastRun      *string `json:"last_run"`
	LastStatus   string  `json:"last_status"`
	LastRunError string  `json:"last_run_error"`
	// Error is the error the daemons see ("" when none): their engines'
	// last error for the job when a live daemon answered (CheckedBy), else
	// the document's error under this command's own check with the
	// daemons' rules (its action checked only with a config file:
	// ActionsChecked). A daemon keeps the last valid timer armed meanwhile.
	Error string `json:"error"`
	// CheckedBy names the live daemons whose engines Error and NextRun
	// come from; empty when this command checked the document itself.
	CheckedBy []string `json:"checked_by"`
	// ActionsChecked is true when Error covers the job's action: the
	// daemons said, or this command had the config's actions.
	ActionsChecked bool `json:"actions_checked"`
	// FailurePause is set while the job is paused after consecutive
	// failed slots (job_pauses) until `schedules resume`.
	FailurePause *failurePauseView `json:"failure_pause,omitempty"`
	// DeleteWithMongosh is, for a document whose _id is not a job id
	// (InvalidID), the mongosh command that deletes it: the commands here
	// address jobs by id, and it is none.
	DeleteWithMongosh string `json:"delete_with_mongosh,omitempty"`
	// Ignored lists the fields of the document no one reads that look
	// like one that is read (docfields.Misspellings): a typo changes
	// nothing, so it is pointed out.
	Ignored []ignoredField `json:"ignored_fields,omitempty"`

	loc *time.Location
	// enabledAs is a refused document's enabled field as written when it
	// is not a boolean (Enabled is then false), for the table.
	enabledAs string
}

// ignoredField is a field of a document no one reads and the field it
// looks like.
type ignoredField struct {
	Field string `json:"field"`
	Meant string `json:"did_you_mean"`
}

// view builds the scheduleView of d as this command checks it, with its
// last run (record.LastRun).
func (s *session) view(ctx context.Context, d admin.ScheduleDoc, now time.Time) (scheduleView, error) {
	v := scheduleView{ID: d.ID, Args: json.RawMessage("null"), loc: s.cfg.Location,
		CheckedBy: []string{}, ActionsChecked: s.rules.ActionsChecked()}
	v.ID, v.InvalidID = schedule.RefusedID(d.ID)
	for _, m := range docfields.Misspellings(d.Raw) {
		v.Ignored = append(v.Ignored, ignoredField{Field: m.Field, Meant: m.Meant})
	}
	sc := d.Schedule
	// A schedule refused only for its action is whole: show it as it is.
	var policy *scheduler.PolicyError
	if d.Err == nil || errors.As(d.Err, &policy) {
		v.CronExpr, v.Timezone, v.Enabled, v.Job, v.Category = sc.CronExpr, sc.Timezone, sc.Enabled, sc.Job, sc.Category
		v.DST = dstName(sc.DST)
		if sc.Args != "" {
			v.Args = json.RawMessage(sc.Args)
		}
		v.UpdatedAt = jsonTime(sc.UpdatedAt, time.UTC)
		if sc.Timezone != "" {
			if loc, err := schedule.LoadLocation(sc.Timezone); err == nil {
				v.loc = loc
			}
		}
		if sched, err := sc.Parse(s.cfg.Location); err == nil && sc.Enabled && d.Err == nil {
			v.NextRun = jsonTime(sched.Next(now), v.loc)
		}
		if d.Err != nil {
			v.Error = d.Err.Error() // not armed by daemons with these actions
		}
	} else {
		// sc holds only the fields decoded before the refusal: show each
		// field as the document holds it, read on its own.
		v.fromDocument(d)
		v.Error = d.Err.Error()
	}
	if v.InvalidID {
		// Runs and locks are keyed by job id: the job of this text is another one.
		v.DeleteWithMongosh = mongoshDelete(s.db.Name(), d.Raw)
		return v, nil
	}
	run, ok, err := s.store.LastRun(ctx, d.ID)
	if err != nil {
		return v, err
	}
	if ok {
		v.LastRun = jsonTime(run.ScheduledAt, v.loc)
		v.LastStatus, v.LastRunError = run.Status, run.Error
	}
	return s.withFailurePause(ctx, v)
}

// fromDocument fills the fields of v from a refused document, each read
// on its own from what the document holds (the decoder stops at the first
// field it refuses): strings as written, enabled true when absent (as the
// daemons read it), dst by its name, args as relaxed extended JSON
// whatever their size, updated_at when it is a date. A field the refusal
// names is shown as written; the error says why.
func (v *scheduleView) fromDocument(d admin.ScheduleDoc) {
	v.CronExpr, v.Timezone, v.Job, v.Category = d.Field(schedule.FieldCronExpr), d.Field(schedule.FieldTimezone), d.Field(schedule.FieldJob), d.Field(schedule.FieldCategory)
	lookup := func(name string) bson.RawValue {
		val, _ := d.Raw.LookupErr(name) // zero Type when absent
		return val
	}
	v.DST = d.Field(schedule.FieldDST)
	switch dst := lookup(schedule.FieldDST); dst.Type {
	case 0, bson.TypeNull:
		v.DST = string(schedule.DSTShift)
	case bson.TypeString:
		if m, err := schedule.ParseDSTMode(dst.StringValue()); err == nil {
			v.DST = string(m)
		}
	}
	switch en := lookup(schedule.FieldEnabled); en.Type {
	case 0:
		v.Enabled = true
	case bson.TypeBoolean:
		v.Enabled = en.Boolean()
	default:
		// Refused: it arms nothing; the table shows it as written.
		v.enabledAs = d.Field(schedule.FieldEnabled)
	}
	if args := lookup(schedule.FieldArgs); args.Type != 0 {
		if js, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: args}}, false, false); err == nil {
			v.Args = json.RawMessage(strings.TrimSuffix(strings.TrimPrefix(string(js), `{"v":`), "}"))
		}
	}
	if t, ok := lookup(schedule.FieldUpdatedAt).TimeOK(); ok {
		v.UpdatedAt = jsonTime(t, time.UTC)
	}
	if tz := lookup(schedule.FieldTimezone); tz.Type == bson.TypeString {
		if loc, err := schedule.LoadLocation(tz.StringValue()); err == nil {
			v.loc = loc // the daemons' next run (their last known good) in the job's zone
		}
	}
}

// mongoshDelete returns the mongosh command that deletes the document raw
// from the schedules collection of database db: its _id in canonical
// extended JSON, so that every type and value is the stored one (a
// listing's rendering of it may be cut short).
func mongoshDelete(db string, raw bson.Raw) string {
	js, err := bson.MarshalExtJSON(bson.D{{Key: schedule.FieldID, Value: raw.Lookup(schedule.FieldID)}}, true, false)
	if err != nil {
		return ""
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(string(js))
	return fmt.Sprintf(`db.getSiblingDB(%q).%s.deleteOne(EJSON.parse('%s'))`, db, schedule.CollectionName, quoted)
}

// notAJobHint is added to "no schedule" for an ID spelt as `schedules
// list` shows a document whose _id is not a job id.
func notAJobHint(id string) string {
	if !strings.HasPrefix(id, "_id ") && !strings.HasPrefix(id, "{") {
		return ""
	}
	return " (a document whose _id is not a string job id is no job, and these commands do not address it: " +
		"`cronswap schedules list` prints the mongosh command that deletes it)"
}

// dstName is how a valid schedule's daylight-saving mode is shown: the
// default by its name rather than empty.
func dstName(m schedule.DSTMode) string {
	if m == "" {
		return string(schedule.DSTShift)
	}
	return string(m)
}

func (v scheduleView) row() []string {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	tz := v.Timezone
	if tz == "" && v.loc != nil {
		tz = v.loc.String() + " (default)"
	}
	errText := v.Error
	if errText == "" && v.LastRunError != "" {
		errText = "last run: " + v.LastRunError
	}
	id := v.ID
	if v.InvalidID {
		id = schedule.ShowKey(schedule.RefusedKey(v.ID))
	}
	status := v.LastStatus
	if v.InvalidID {
		status = "not a job"
	}
	if v.FailurePause != nil {
		status, errText = "paused after failures", v.FailurePause.Note
	}
	enabled := strconv.FormatBool(v.Enabled)
	if v.enabledAs != "" {
		enabled = v.enabledAs
	}
	return []string{id, v.CronExpr, tz, enabled, str(v.NextRun), str(v.LastRun), status, errText}
}

func scheduleHeader() []string {
	return []string{"ID", "EXPR", "TZ", "ENABLED", "NEXT RUN", "LAST RUN", "STATUS", "ERROR"}
}

func schedulesCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "schedules",
		Usage: "list, show and edit the schedules collection",
		Subcommands: []*ucli.Command{
			schedulesList(), schedulesGet(), schedulesSet(), schedulesDelete(),
			schedulesEnable("pause", false), schedulesEnable("resume", true), schedulesHistory(),
		},
	}
}

// oneID returns the single ID argument or a usage error.
func oneID(c *ucli.Context, example string) (string, error) {
	if c.NArg() != 1 || c.Args().First() == "" {
		return "", ucli.Exit(fmt.Sprintf("want exactly one job ID argument, e.g. %s", example), ExitUserError)
	}
	return c.Args().First(), nil
}

func notFound(err error) bool { return errors.Is(err, admin.ErrNotFound) }

func schedulesList() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list every schedule: expression, zone, enabled, next run, last run and status, error",
		Flags: dbFlags(),
		Action: func(c *ucli.Context) error {
			return withDB(c, func(ctx context.Context, s *session) error {
				docs, err := s.store.Schedules(ctx)
				if err != nil {
					return s.fail(err)
				}
				dv := askDaemons(ctx, s, "")
				now := time.Now()
				views := make([]scheduleView, 0, len(docs))
				for _, d := range docs {
					v, err := s.view(ctx, d, now)
					if err != nil {
						return s.fail(err)
					}
					v.seen(dv)
					views = append(views, v)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, views)
				}
				rows := make([][]string, len(views))
				for i, v := range views {
					rows[i] = v.row()
				}
				table(c.App.Writer, scheduleHeader(), rows)
				fmt.Fprintln(c.App.ErrWriter, dv.checkedBy(s))
				for _, v := range views {
					if v.DeleteWithMongosh != "" {
						fmt.Fprintf(c.App.ErrWriter, "%s is not a job (its _id is not a string job id), so `schedules get/delete` do not address it; delete it with mongosh:\n  %s\n",
							schedule.ShowKey(schedule.RefusedKey(v.ID)), v.DeleteWithMongosh)
					}
				}
				return nil
			})
		},
	}
}

func schedulesGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show one schedule",
		ArgsUsage: "ID",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap schedules get daily_report")
			if err != nil {
				return err
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				d, err := s.store.Schedule(ctx, id)
				if notFound(err) {
					return ucli.Exit(err.Error()+notAJobHint(id), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				v, err := s.view(ctx, d, time.Now())
				if err != nil {
					return s.fail(err)
				}
				dv := askDaemons(ctx, s, id)
				v.seen(dv)
				if isJSON(c) {
					return writeJSON(c.App.Writer, v)
				}
				vals := v.row()
				rows := make([][]string, 0, len(vals)+4)
				for i, h := range scheduleHeader() {
					rows = append(rows, []string{strings.ToLower(h) + ":", vals[i]})
				}
				args := string(v.Args)
				if args == "null" {
					args = ""
				}
				upd := ""
				if v.UpdatedAt != nil {
					upd = *v.UpdatedAt
				}
				checked := dv.checkedBy(s)
				switch {
				case len(v.CheckedBy) > 0:
					checked = "daemons " + strings.Join(v.CheckedBy, ", ")
				case len(dv.answers) > 0:
					checked = "no live daemon holds it yet: " + s.localCheck()
				}
				rows = append(rows, []string{"dst:", v.DST}, []string{"job:", v.Job}, []string{"category:", v.Category}, []string{"args:", args},
					[]string{"updated at:", upd}, []string{"checked by:", checked})
				for _, f := range v.Ignored {
					rows = append(rows, []string{"ignored:", fmt.Sprintf("%s (no such field; did you mean %s?)", f.Field, f.Meant)})
				}
				table(c.App.Writer, []string{"FIELD", "VALUE"}, rows)
				return nil
			})
		},
	}
}

func schedulesSet() *ucli.Command {
	return &ucli.Command{
		Name:      "set",
		Usage:     "create or change a schedule: only the fields given change (checked with the daemons' rules before anything is written; sets updated_at, and updated_by to user@host)",
		ArgsUsage: "ID",
		Flags: dbFlags(
			&ucli.StringFlag{Name: "cron", Usage: fmt.Sprintf(`cron expression, e.g. "0 9 * * 1-5", "*/30 * * * * *", "@hourly"; at most %d bytes (required to create a schedule)`, schedule.MaxExprBytes)},
			&ucli.StringFlag{Name: "tz", Usage: `IANA time zone, e.g. Asia/Seoul ("" removes it: the config's default applies)`},
			&ucli.StringFlag{Name: "job", Usage: `name of the action in the config's jobs ("" removes it: the ID is the action); checked against the config's actions when --config is given`},
			&ucli.StringFlag{Name: "category", Usage: `dispatch category ("" removes it)`},
			&ucli.StringFlag{Name: "dst", Usage: `daylight saving: shift (a time the clocks skip runs right after the jump, a fixed time the clocks repeat runs once) or plain (skipped times do not run, repeated ones run at each occurrence); "" removes it, back to shift`},
			&ucli.StringFlag{Name: "args", Usage: `JSON object handed to the action, e.g. '{"region":"eu"}'`},
		),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, setExample)
			if err != nil {
				return err
			}
			refuse := func(format string, a ...any) error {
				return ucli.Exit(fmt.Sprintf("refused, nothing written: "+format+"\nexample: %s", append(a, setExample)...), ExitUserError)
			}
			if _, err := outputFormat(c); err != nil {
				return err
			}
			var edit admin.ScheduleEdit
			// Check the flags before connecting, so the message names the flag.
			if err := checkSetFlags(c, id, &edit); err != nil {
				return refuse("%v", err)
			}
			edit.By = currentUser()
			return withDB(c, func(ctx context.Context, s *session) error {
				res, err := s.store.SetSchedule(ctx, id, edit)
				switch {
				case errors.Is(err, admin.ErrNeedsExpression):
					return refuse("no schedule %q yet, and --cron is required to create one", id)
				case errors.Is(err, schedule.ErrInvalid):
					return refuse("%v", err)
				case err != nil:
					return s.fail(err)
				}
				d, err := s.store.Schedule(ctx, id)
				if err != nil {
					return s.fail(err)
				}
				v, err := s.view(ctx, d, time.Now())
				if err != nil {
					return s.fail(err)
				}
				warning := ""
				if res.Warning != nil {
					warning = fmt.Sprintf("%v — written anyway: daemons running %s will not arm it (one armed before keeps "+
						"its last valid timing), unless a Go program embedding cronswap registers that action", res.Warning, s.configFile)
					fmt.Fprintln(c.App.ErrWriter, "cronswap: warning:", warning)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, struct {
						Created bool   `json:"created"`
						Warning string `json:"warning,omitempty"`
						scheduleView
					}{res.Created, warning, v})
				}
				verb := "updated"
				if res.Created {
					verb = "created"
				}
				next := "none (disabled)"
				switch {
				case res.Warning != nil:
					next = "none (its action is not in the config)"
				case v.NextRun != nil:
					next = *v.NextRun
					if !s.rules.ActionsChecked() {
						// The daemons refuse an action their config lacks.
						action := cmp.Or(v.Job, id)
						why := "no --config or CRONSWAP_CONFIG given"
						if s.configFile != "" {
							why = s.configFile + " defines no jobs"
						}
						next += fmt.Sprintf(" if the daemons have action %q (not checked: %s)", action, why)
					}
				}
				fmt.Fprintf(c.App.Writer, "%s %s: %q, next run %s\n", verb, id, v.CronExpr, next)
				return nil
			})
		},
	}
}

// checkSetFlags checks the flags of `schedules set` on their own and fills
// edit; only the flags given are set. The document they make of the stored
// one is checked again, whole, by the store.
func checkSetFlags(c *ucli.Context, id string, edit *admin.ScheduleEdit) error {
	if id == "" || len(id) > schedule.MaxIDBytes {
		return fmt.Errorf("job ID %q: want 1 to %d bytes", id, schedule.MaxIDBytes)
	}
	loc := time.UTC
	if c.IsSet("tz") {
		tz := strings.TrimSpace(c.String("tz"))
		edit.Timezone = &tz
		if tz != "" {
			l, err := schedule.LoadLocation(tz)
			if err != nil {
				return fmt.Errorf("--tz: %w", err)
			}
			loc = l
		}
	}
	opts := schedule.ParseOptions{JobID: id}
	if c.IsSet("dst") {
		v := strings.TrimSpace(c.String("dst"))
		if v != "" {
			m, err := schedule.ParseDSTMode(v)
			if err != nil {
				return fmt.Errorf("--dst: %w", err)
			}
			opts.DST = m
		}
		edit.DST = &v
	}
	if c.IsSet("cron") {
		// As given: the length limit counts the white space around it,
		// as the daemons count it in the document.
		expr := c.String("cron")
		if _, err := schedule.ParseExprWith(expr, loc, opts); err != nil {
			if len(expr) > schedule.MaxExprBytes {
				return fmt.Errorf("--cron: %w", err)
			}
			return fmt.Errorf("--cron %q: %w", expr, err)
		}
		expr = strings.TrimSpace(expr)
		edit.CronExpr = &expr
	}
	for _, f := range []struct {
		name string
		dst  **string
	}{{"job", &edit.Job}, {"category", &edit.Category}} {
		if c.IsSet(f.name) {
			v := strings.TrimSpace(c.String(f.name))
			if len(v) > schedule.MaxNameBytes {
				return fmt.Errorf("--%s: %d bytes, more than %d", f.name, len(v), schedule.MaxNameBytes)
			}
			*f.dst = &v
		}
	}
	if c.IsSet("args") {
		var doc bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(c.String("args")), false, &doc); err != nil {
			return fmt.Errorf("--args %s: not a JSON object: %v", c.String("args"), err)
		}
		edit.Args = doc
	}
	if e := *edit; e.CronExpr == nil && e.Timezone == nil && e.DST == nil && e.Job == nil && e.Category == nil && e.Args == nil {
		return errors.New("nothing to change: give at least one of --cron, --tz, --dst, --job, --category, --args")
	}
	return nil
}

func schedulesDelete() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Usage:     "delete a schedule (the daemon disarms it)",
		ArgsUsage: "ID",
		Flags:     dbFlags(),
		Action: func(c *ucli.Context) error {
			id, err := oneID(c, "cronswap schedules delete daily_report")
			if err != nil {
				return err
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				err := s.store.DeleteSchedule(ctx, id)
				if notFound(err) {
					return ucli.Exit(fmt.Sprintf("no schedule %q%s", id, notAJobHint(id)), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, map[string]any{"id": id, "deleted": true})
				}
				fmt.Fprintf(c.App.Writer, "deleted %s\n", id)
				return nil
			})
		},
	}
}

func schedulesEnable(name string, enabled bool) *ucli.Command {
	usage := "disarm a schedule without deleting it (enabled: false)"
	if enabled {
		usage = "re-arm a paused schedule (enabled: true) and clear a pause after consecutive failed slots (job_pauses)"
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "ID | --category C",
		Flags:     dbFlags(categoryFlag()),
		Action: func(c *ucli.Context) error {
			if c.IsSet("category") {
				return enableCategory(c, name, enabled)
			}
			id, err := oneID(c, "cronswap schedules "+name+" daily_report")
			if err != nil {
				return err
			}
			return withDB(c, func(ctx context.Context, s *session) error {
				changed, err := s.store.SetEnabled(ctx, id, enabled, currentUser())
				if notFound(err) {
					return ucli.Exit(fmt.Sprintf("no schedule %q", id), ExitUserError)
				}
				if err != nil {
					return s.fail(err)
				}
				if enabled { // resume also clears a pause after consecutive failures
					cleared, err := s.resumeFailurePause(ctx, id)
					if err != nil {
						return s.fail(err)
					}
					changed = changed || cleared
				}
				if isJSON(c) {
					return writeJSON(c.App.Writer, map[string]any{"id": id, "enabled": enabled, "changed": changed})
				}
				past := map[bool]string{false: "paused", true: "resumed"}[enabled]
				if changed {
					fmt.Fprintf(c.App.Writer, "%s %s\n", past, id)
				} else {
					fmt.Fprintf(c.App.Writer, "%s was already %s\n", id, map[bool]string{false: "paused", true: "enabled"}[enabled])
				}
				return nil
			})
		},
	}
}
