package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/schedfile"
	"github.com/cronswap/cronswap/internal/scratch"
	"github.com/cronswap/cronswap/internal/timeline"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// ExitChangesPending is the exit code of `plan` when applying the file
// would change the database, and of `apply` when it left conflicts: the
// database differs from the file.
const ExitChangesPending = 3

// changesPending is the error of exit ExitChangesPending (urfave/cli's own
// exit 3, an unknown command, stays a user error).
type changesPending struct{ msg string }

func (e changesPending) Error() string { return e.msg }

// ExitCode makes changesPending a ucli.ExitCoder.
func (e changesPending) ExitCode() int { return ExitChangesPending }

const (
	// planBatch is how many entries are planned (one read of their
	// documents) and applied (one bulk write) at a time.
	planBatch = 1000
	// nextRunsShown is how many next runs a plan shows for a changed
	// timing, before and after.
	nextRunsShown = 3
	// envUpdatedBy names who applies when --by is not given.
	envUpdatedBy = "CRONSWAP_UPDATED_BY"
)

func exportCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "export",
		Usage: "print the schedules as a file for plan and apply: one YAML document per job in _id order, only the fields a user sets (streams)",
		Flags: append(append(commonFlags(),
			&ucli.DurationFlag{Name: "timeout", Value: defaultTimeout, Usage: "how long to wait for the server (exit 2 when it cannot be reached)"},
			&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: schedfile.FormatYAML, Usage: "yaml (one document per job) or json (an array)"},
		), selectFlags("export")...),
		Action: func(c *ucli.Context) error {
			format := c.String("output")
			if format != schedfile.FormatYAML && format != schedfile.FormatJSON {
				return ucli.Exit(fmt.Sprintf("--output %q: want yaml or json", format), ExitUserError)
			}
			if c.NArg() > 0 {
				return ucli.Exit("export takes no argument: cronswap export > schedules.yaml", ExitUserError)
			}
			filter, err := scheduleFilter(c, "export every schedule")
			if err != nil {
				return err
			}
			return withSession(c, false, func(ctx context.Context, s *session) error {
				w, err := schedfile.NewWriter(c.App.Writer, format)
				if err != nil {
					return ucli.Exit(err.Error(), ExitUserError)
				}
				var refused []string
				n := 0
				err = s.store.EachSchedule(ctx, filter, nil,
					func(doc bson.Raw) error {
						id, err := schedule.DecodeID(doc.Lookup(schedule.FieldID))
						if err != nil {
							refused = append(refused, fmt.Sprintf("left out (not a job): %v", err))
							return nil
						}
						if _, err := s.rules.Check(doc); err != nil {
							refused = append(refused, fmt.Sprintf("%s: exported as stored, which the daemons refuse: %v", id, err))
						}
						n++
						return w.Write(doc)
					})
				if err != nil {
					return s.fail(err)
				}
				if err := w.Close(); err != nil {
					return ucli.Exit(fmt.Sprintf("write: %v", err), ExitUserError)
				}
				for _, r := range refused {
					fmt.Fprintln(c.App.ErrWriter, "cronswap: warning:", r)
				}
				fmt.Fprintf(c.App.ErrWriter, "exported %d schedules\n", n)
				return nil
			})
		},
	}
}

// selectFlags are the flags that select schedules (scheduleFilter reads
// them): export writes only those, plan and apply compare and prune only
// those. what names the command's action on them.
func selectFlags(cmd string) []ucli.Flag {
	what := "only the schedules"
	if cmd != "export" {
		what = "compare and prune only the schedules"
	}
	return []ucli.Flag{
		&ucli.StringFlag{Name: "category", Usage: what + " of this category"},
		&ucli.StringFlag{Name: "id-prefix", Usage: what + " whose job id starts with this"},
	}
}

// scheduleFilter is the selection of --category and --id-prefix. An empty
// value given (--id-prefix "$UNSET") would select every schedule: refused,
// so that a file meant to hold some does not silently hold all, nor a
// prune meant for some reach all; absent says what leaving the flags out
// does.
func scheduleFilter(c *ucli.Context, absent string) (admin.ScheduleFilter, error) {
	for _, name := range []string{"category", "id-prefix"} {
		if c.IsSet(name) && c.String(name) == "" {
			return admin.ScheduleFilter{}, ucli.Exit(fmt.Sprintf("--%s is empty: give a value, or leave the flag out to %s", name, absent), ExitUserError)
		}
	}
	return admin.ScheduleFilter{Category: c.String("category"), IDPrefix: c.String("id-prefix")}, nil
}

// selection names a filter as the flags that make it.
func selection(f admin.ScheduleFilter) string {
	var parts []string
	if f.Category != "" {
		parts = append(parts, "--category "+strconv.Quote(f.Category))
	}
	if f.IDPrefix != "" {
		parts = append(parts, "--id-prefix "+strconv.Quote(f.IDPrefix))
	}
	return strings.Join(parts, " ")
}

// fileFlags are the flags of plan and apply that say what to read.
func fileFlags(cmd string) []ucli.Flag {
	return append(selectFlags(cmd),
		&ucli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "the schedules file (YAML, or a JSON array as export -o json writes); - reads stdin"},
		&ucli.StringFlag{Name: "max-file-size", Value: "64MiB", Usage: "refuse a larger file (B, KiB, MiB, GiB)"},
		&ucli.BoolFlag{Name: "prune", Usage: "also delete the managed schedules (written by apply) the file does not name, of the selection with --category or --id-prefix; never one created otherwise"},
		&ucli.BoolFlag{Name: "adopt", Usage: "also mark as managed the file's schedules that are unchanged but were created otherwise, so that --prune may delete them later"},
		&ucli.BoolFlag{Name: "allow-unknown-actions", Usage: "a job whose action the config lacks is a warning, not a refusal (a Go program embedding cronswap registers it)"},
	)
}

func planCommand(stdin io.Reader) *ucli.Command {
	return &ucli.Command{
		Name: "plan",
		Usage: "show what applying a schedules file would do: create, update (field by field, with the next runs), delete (--prune), unchanged; " +
			"exit 3 when there are changes",
		Flags: dbFlags(append(fileFlags("plan"),
			&ucli.StringFlag{Name: "out", Usage: "save the plan, with the state each document was planned from, for apply --plan"},
			&ucli.StringFlag{Name: "from", Usage: "show the next runs after this instant: RFC 3339, now, or relative like -2h, +7d (default now)"})...),
		Action: func(c *ucli.Context) error {
			// The same times as explain, backfill and blackouts take.
			from := time.Now()
			if v := c.String("from"); v != "" {
				t, err := timeline.ParseTime(v, from)
				if err != nil {
					return ucli.Exit("--from: "+err.Error(), ExitUserError)
				}
				from = t
			}
			src, err := openFile(c, stdin)
			if err != nil {
				return err
			}
			defer src.close()
			return withSession(c, false, func(ctx context.Context, s *session) error {
				check, err := s.checkFile(ctx, c, src)
				if err != nil {
					return err
				}
				var saved *planWriter
				if out := c.String("out"); out != "" {
					if saved, err = createPlanFile(out, planHeader{Database: s.cfg.Mongo.Database, File: src.name,
						Prune: c.Bool("prune"), Adopt: c.Bool("adopt"), Category: src.filter.Category, IDPrefix: src.filter.IDPrefix}); err != nil {
						return ucli.Exit(err.Error(), ExitUserError)
					}
				}
				out := newPlanOutput(c, s, from)
				sum := planSummary{selection: selection(src.filter)}
				record := func(changes []admin.Change) error {
					for _, ch := range changes {
						sum.count(ch)
						if ch.Op == admin.OpUnchanged {
							continue
						}
						out.change(ch)
						if saved != nil {
							if err := saved.write(ch); err != nil {
								return err
							}
						}
					}
					return nil
				}
				if err := s.planFile(ctx, src, c.Bool("adopt"), record); err != nil {
					return s.fail(err)
				}
				if sum.ManagedAbsent, sum.UnmanagedAbsent, err = s.planAbsent(ctx, src.filter, check.ids, c.Bool("prune"), record); err != nil {
					return s.fail(err)
				}
				if err := out.end(sum); err != nil {
					return err
				}
				if saved != nil {
					if err := saved.close(); err != nil {
						return ucli.Exit(err.Error(), ExitUserError)
					}
					fmt.Fprintf(c.App.ErrWriter, "plan saved to %s: cronswap apply --plan %s\n", saved.path, saved.path)
				}
				if sum.pending() > 0 {
					return changesPending{}
				}
				return nil
			})
		},
	}
}

func applyCommand(stdin io.Reader) *ucli.Command {
	return &ucli.Command{
		Name: "apply",
		Usage: "make the schedules what a file says: every entry checked first with the daemons' rules (one bad entry: nothing written), " +
			"then unordered bulk writes, each conditional on the state it was planned from (a document changed meanwhile is a conflict, left alone)",
		Flags: dbFlags(append(fileFlags("apply"),
			&ucli.StringFlag{Name: "plan", Usage: "apply a plan saved by plan --out instead of a file: conditional on the state it was planned from"},
			&ucli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "why: written as update_message on every document written, so the edit history shows it"},
			&ucli.StringFlag{Name: "by", EnvVars: []string{envUpdatedBy}, Usage: "who applies, written as updated_by (default: user@host of the command)"},
			&ucli.BoolFlag{Name: "force", Usage: "overwrite documents changed since they were planned instead of reporting a conflict"},
		)...),
		Action: func(c *ucli.Context) error {
			by, err := updatedBy(c)
			if err != nil {
				return err
			}
			meta := admin.WriteMeta{Author: admin.Author{By: by, Message: c.String("message")}, Force: c.Bool("force"), At: time.Now()}
			if c.IsSet("plan") {
				return applyPlanFile(c, meta)
			}
			src, err := openFile(c, stdin)
			if err != nil {
				return err
			}
			defer src.close()
			return withSession(c, false, func(ctx context.Context, s *session) error {
				check, err := s.checkFile(ctx, c, src)
				if err != nil {
					return err
				}
				out := newApplyOutput(c)
				sum := planSummary{selection: selection(src.filter)}
				write := func(changes []admin.Change) error {
					return s.applyBatch(ctx, changes, meta, &sum, out)
				}
				if err := s.planFile(ctx, src, c.Bool("adopt"), write); err != nil {
					return s.fail(err)
				}
				if sum.ManagedAbsent, sum.UnmanagedAbsent, err = s.planAbsent(ctx, src.filter, check.ids, c.Bool("prune"), write); err != nil {
					return s.fail(err)
				}
				return out.end(sum)
			})
		},
	}
}

// updatedBy is who applies: --by, CRONSWAP_UPDATED_BY, else the user
// running the command (currentUser).
func updatedBy(c *ucli.Context) (string, error) {
	by := strings.TrimSpace(c.String("by"))
	if by == "" {
		by = currentUser()
	}
	if len(by) > schedule.MaxNameBytes {
		return "", ucli.Exit(fmt.Sprintf("--by: %d bytes, more than %d", len(by), schedule.MaxNameBytes), ExitUserError)
	}
	return by, nil
}

// applyBatch writes one batch of planned changes and reports each.
func (s *session) applyBatch(ctx context.Context, changes []admin.Change, meta admin.WriteMeta, sum *planSummary, out *applyOutput) error {
	bctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	outcomes, err := s.store.ApplyChanges(bctx, changes, meta)
	if err != nil {
		return err
	}
	for i, ch := range changes {
		sum.result(ch, outcomes[i])
		if ch.Op != admin.OpUnchanged {
			out.result(ch, outcomes[i])
		}
	}
	return nil
}

// source is the file plan and apply read, once to check it and again to
// plan it.
type source struct {
	name string // as given; "-" for stdin
	path string // what to open, when not stdin
	max  int64
	// stdin is the copy of stdin (scratch.New: no name on disk, so a CLI
	// killed meanwhile leaves nothing behind), size bytes; nil for a file.
	stdin *os.File
	size  int64
	// filter selects what is compared and pruned (--category, --id-prefix):
	// an entry it does not select is refused.
	filter admin.ScheduleFilter
}

// openFile checks --file, --max-file-size and the selection; stdin is copied to a
// temporary file without a name (at most the limit), since the file is read twice.
func openFile(c *ucli.Context, stdin io.Reader) (*source, error) {
	name := c.String("file")
	if name == "" {
		return nil, ucli.Exit("give the schedules file: -f schedules.yaml (- for stdin); cronswap export writes one", ExitUserError)
	}
	if c.NArg() > 0 {
		return nil, ucli.Exit(fmt.Sprintf("unexpected argument %q: the file is given with -f", c.Args().First()), ExitUserError)
	}
	if _, err := outputFormat(c); err != nil {
		return nil, err
	}
	filter, err := scheduleFilter(c, "compare and prune every schedule")
	if err != nil {
		return nil, err
	}
	max, err := parseSize(c.String("max-file-size"))
	if err != nil {
		return nil, ucli.Exit("--max-file-size: "+err.Error(), ExitUserError)
	}
	tooLarge := func(size int64) error {
		return ucli.Exit(fmt.Sprintf("refused, nothing read: %s is %d bytes, more than the limit of %d (raise it with --max-file-size)", name, size, max), ExitUserError)
	}
	if name != "-" {
		st, err := os.Stat(name)
		if err != nil {
			return nil, ucli.Exit(err.Error(), ExitUserError)
		}
		if st.IsDir() {
			return nil, ucli.Exit(name+" is a directory", ExitUserError)
		}
		if st.Size() > max {
			return nil, tooLarge(st.Size())
		}
		return &source{name: name, path: name, max: max, filter: filter}, nil
	}
	f, err := scratch.New("cronswap-stdin-*.yaml")
	if err != nil {
		return nil, ucli.Exit(err.Error(), ExitUserError)
	}
	src := &source{name: "-", max: max, stdin: f, filter: filter}
	n, err := io.Copy(f, io.LimitReader(stdin, max+1))
	if err != nil {
		src.close()
		return nil, ucli.Exit("read stdin: "+err.Error(), ExitUserError)
	}
	if n > max {
		src.close()
		return nil, tooLarge(n)
	}
	src.size = n
	return src, nil
}

// reader reads the file from its start, each time it is called; close the
// closer when done.
func (s *source) reader() (*schedfile.Reader, io.Closer, error) {
	if s.stdin != nil {
		return schedfile.NewReader(io.NewSectionReader(s.stdin, 0, s.size), s.max), io.NopCloser(nil), nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, nil, err
	}
	return schedfile.NewReader(f, s.max), f, nil
}

// close lets go of the copy of stdin, if any.
func (s *source) close() {
	if s.stdin != nil {
		_ = scratch.Close(s.stdin)
	}
}

// parseSize reads a size: a number of bytes, or with a suffix B, KiB, MiB,
// GiB (KB, MB, GB: powers of 1000).
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size like 64MiB or 1000000", v)
	}
	return n * mult, nil
}

// fileCheck is what checkFile learnt of a file.
type fileCheck struct {
	// ids holds the line of each job id the file names.
	ids map[string]int
}

// checkFile reads the whole file once and checks every entry: the
// format's rules (fields, aliases, keys given twice), the daemons' rules
// on the document it makes (admin.Rules.Check: the decoder, then
// scheduler.Check with the config's zone and, given a config, its
// actions), ids named twice, and, with a selection (src.filter), an entry
// it does not select, then a stored document of the file's ids it does
// not select (an entry that would move a schedule into the selection).
// Every problem is printed with its line on stderr; any problem is a user
// error with nothing written.
func (s *session) checkFile(ctx context.Context, c *ucli.Context, src *source) (fileCheck, error) {
	r, f, err := src.reader()
	if err != nil {
		return fileCheck{}, ucli.Exit(err.Error(), ExitUserError)
	}
	defer f.Close()
	allowUnknown := c.Bool("allow-unknown-actions")
	check := fileCheck{ids: map[string]int{}}
	problems, entries := 0, 0
	report := func(p *schedfile.Problem, warning bool) {
		if warning {
			p.Msg = "warning: " + p.Msg
			fmt.Fprintf(c.App.ErrWriter, "%s: %v\n", src.name, p)
			return
		}
		problems++
		fmt.Fprintf(c.App.ErrWriter, "%s: %v\n", src.name, p)
	}
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var p *schedfile.Problem
			if !errors.As(err, &p) {
				p = &schedfile.Problem{Msg: err.Error()}
			}
			report(p, false)
			break
		}
		entries++
		for _, p := range e.Problems {
			p.ID = e.ID
			report(p, false)
		}
		if e.Doc != nil {
			if p, warning := s.checkEntry(e, allowUnknown); p != nil {
				report(p, warning)
			}
			if !src.filter.Selects(e.Doc) {
				report(&schedfile.Problem{Line: e.Line, ID: e.ID, Msg: fmt.Sprintf("not selected by %s (%s in the file): "+
					"remove the entry, or leave the selection out", selection(src.filter), describe(e.Doc))}, false)
			}
		}
		if e.ID == "" {
			continue
		}
		if first, dup := check.ids[e.ID]; dup {
			report(&schedfile.Problem{Line: e.FieldLine(schedule.FieldID), ID: e.ID,
				Msg: fmt.Sprintf("_id given twice (first at line %d): one entry per job", first)}, false)
			continue
		}
		check.ids[e.ID] = e.Line
	}
	if problems > 0 {
		return check, ucli.Exit(fmt.Sprintf("refused, nothing written: %d problem(s) in %s (listed above)", problems, src.name), ExitUserError)
	}
	if entries == 0 {
		return check, ucli.Exit(fmt.Sprintf("refused, nothing written: %s holds no schedule "+
			"(an empty file is refused, so that a truncated one cannot prune every managed schedule)", src.name), ExitUserError)
	}
	if src.filter.IsZero() {
		return check, nil
	}
	outside, err := s.storedOutside(ctx, src.filter, check.ids)
	if err != nil {
		return check, s.fail(err)
	}
	for _, id := range outside {
		fmt.Fprintf(c.App.ErrWriter, "%s: line %d: %s: not selected by %s as stored (%s): the file would change a schedule outside the selection\n",
			src.name, check.ids[id.ID], id.ID, selection(src.filter), describe(id.doc))
	}
	if len(outside) > 0 {
		return check, ucli.Exit(fmt.Sprintf("refused, nothing written: %d schedule(s) of %s outside %s (listed above)",
			len(outside), src.name, selection(src.filter)), ExitUserError)
	}
	return check, nil
}

// storedDoc is a stored document and its job id.
type storedDoc struct {
	ID  string
	doc bson.Raw
}

// storedOutside reads the stored documents of ids, planBatch at a time,
// and returns those f does not select, in id order.
func (s *session) storedOutside(ctx context.Context, f admin.ScheduleFilter, ids map[string]int) ([]storedDoc, error) {
	all := make([]string, 0, len(ids))
	for id := range ids {
		all = append(all, id)
	}
	slices.Sort(all)
	var out []storedDoc
	for batch := range slices.Chunk(all, planBatch) {
		bctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		stored, err := s.store.SchedulesByID(bctx, batch)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, id := range batch {
			if doc := stored[id]; doc != nil && !f.Selects(doc) {
				out = append(out, storedDoc{ID: id, doc: doc})
			}
		}
	}
	return out, nil
}

// describe names what a selection reads of a document: its category.
func describe(doc bson.Raw) string {
	v := doc.Lookup(schedule.FieldCategory)
	if c, ok := v.StringValueOK(); ok {
		return "category " + strconv.Quote(c)
	}
	if v.Type == 0 {
		return "no category"
	}
	return "category " + v.String()
}

// checkEntry checks an entry's document with the daemons' rules; the
// problem is a warning when it is only an action the config lacks and
// allowUnknown is set.
func (s *session) checkEntry(e schedfile.Entry, allowUnknown bool) (*schedfile.Problem, bool) {
	_, err := s.rules.Check(e.Doc)
	if err == nil {
		return nil, false
	}
	var policy *scheduler.PolicyError
	if errors.As(err, &policy) {
		msg := fmt.Sprintf("%v (the daemons with this config will not arm it", err)
		if allowUnknown {
			return &schedfile.Problem{Line: e.FieldLine(schedule.FieldJob), Msg: msg + ")"}, true
		}
		return &schedfile.Problem{Line: e.FieldLine(schedule.FieldJob), Msg: msg + "; --allow-unknown-actions if a Go program registers it)"}, false
	}
	line := e.Line
	var se *schedule.Error
	if errors.As(err, &se) && se.Field != "" {
		line = e.FieldLine(se.Field)
	}
	return &schedfile.Problem{Line: line, Msg: err.Error()}, false
}

// planFile reads the checked file again, planning planBatch entries at a
// time against the documents stored now, and hands each batch to fn.
func (s *session) planFile(ctx context.Context, src *source, adopt bool, fn func([]admin.Change) error) error {
	r, f, err := src.reader()
	if err != nil {
		return ucli.Exit(err.Error(), ExitUserError)
	}
	defer f.Close()
	batch := make([]schedfile.Entry, 0, planBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
		}
		bctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		stored, err := s.store.SchedulesByID(bctx, ids)
		cancel()
		if err != nil {
			return err
		}
		changes := make([]admin.Change, len(batch))
		for i, e := range batch {
			if doc := stored[e.ID]; doc != nil && !src.filter.Selects(doc) {
				// checkFile found it selected a moment ago: changed since.
				return ucli.Exit(fmt.Sprintf("%s: line %d: %s: stored %s now, outside %s; nothing more written",
					src.name, e.Line, e.ID, describe(doc), selection(src.filter)), ExitUserError)
			}
			changes[i] = admin.PlanChange(e.ID, e.Line, stored[e.ID], e.Doc, adopt)
		}
		batch = batch[:0]
		return fn(changes)
	}
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil || e.Doc == nil {
			// The file was checked whole a moment ago: it changed since.
			return ucli.Exit(fmt.Sprintf("%s changed while it was being read; nothing more written", src.name), ExitUserError)
		}
		batch = append(batch, e)
		if len(batch) == planBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// planAbsent walks the stored schedules f selects that the file does not
// name (ids), reading only their ids and markers (and what f reads): with
// prune, the managed ones are read whole and planned as deletes,
// planBatch at a time, and handed to fn. It counts the managed and the
// other absent ones.
func (s *session) planAbsent(ctx context.Context, f admin.ScheduleFilter, ids map[string]int, prune bool, fn func([]admin.Change) error) (managed, unmanaged int, err error) {
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		bctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		stored, err := s.store.SchedulesByID(bctx, batch)
		cancel()
		if err != nil {
			return err
		}
		var changes []admin.Change
		for _, id := range batch {
			// Gone, no longer managed or no longer selected since the walk
			// read it: nothing to prune.
			if doc := stored[id]; doc != nil && admin.IsManaged(doc) && f.Selects(doc) {
				changes = append(changes, admin.PlanDelete(id, doc))
			}
		}
		batch = batch[:0]
		if len(changes) == 0 {
			return nil
		}
		return fn(changes)
	}
	err = s.store.EachSchedule(ctx, f, []string{admin.FieldManagedBy}, func(doc bson.Raw) error {
		id, ok := doc.Lookup(schedule.FieldID).StringValueOK()
		if !ok {
			return nil // not a job: apply never writes one
		}
		if _, named := ids[id]; named {
			return nil
		}
		if !admin.IsManaged(doc) {
			unmanaged++
			return nil
		}
		managed++
		if prune {
			batch = append(batch, id)
			if len(batch) == planBatch {
				return flush()
			}
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return managed, unmanaged, err
}

// planSummary counts a plan's or an apply's changes.
type planSummary struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Delete    int `json:"delete"`
	Adopt     int `json:"adopt"`
	Unchanged int `json:"unchanged"`
	// ManagedAbsent are the managed schedules the file does not name
	// (deleted with --prune); UnmanagedAbsent the others it does not name,
	// which apply never deletes.
	ManagedAbsent   int `json:"managed_not_in_file"`
	UnmanagedAbsent int `json:"unmanaged_not_in_file"`
	// Of an apply: the changes left alone, refused, or already done.
	Conflicts int `json:"conflicts"`
	Failed    int `json:"failed"`
	Gone      int `json:"already_deleted"`
	// selection names the --category and --id-prefix the counts are of;
	// "" for every schedule.
	selection string
}

func (p *planSummary) count(c admin.Change) {
	switch c.Op {
	case admin.OpCreate:
		p.Create++
	case admin.OpUpdate:
		p.Update++
	case admin.OpDelete:
		p.Delete++
	case admin.OpAdopt:
		p.Adopt++
	case admin.OpUnchanged:
		p.Unchanged++
	}
}

// result counts what an apply did with c: only what was written counts
// as its op.
func (p *planSummary) result(c admin.Change, o admin.Outcome) {
	switch o.Result {
	case admin.Applied:
		p.count(c)
	case admin.Conflict:
		p.Conflicts++
	case admin.Failed:
		p.Failed++
	case admin.Gone:
		p.Gone++
	}
}

// pending is how many changes the plan would write.
func (p planSummary) pending() int { return p.Create + p.Update + p.Delete + p.Adopt }

func (p planSummary) text(verbs [5]string) string {
	return fmt.Sprintf("%d %s, %d %s, %d %s, %d %s, %d %s", p.Create, verbs[0], p.Update, verbs[1], p.Delete, verbs[2],
		p.Adopt, verbs[3], p.Unchanged, verbs[4])
}
