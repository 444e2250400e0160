package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// completionFlag is the argument urfave/cli looks for, last, to print completions.
const completionFlag = "--generate-bash-completion"

// interspersed reorders a command line so that flags given after a leaf
// command's positional arguments are parsed too: urfave/cli v2 (like the flag
// package) stops at the first positional argument, so the documented
// `cronswap next EXPR -n 5 --tz ZONE` would otherwise leave -n and --tz as
// extra arguments. For the leaf command named on the line, its flags (with
// their values) are moved before its positional arguments, keeping their
// order; everything after "--" stays positional. Lines naming no known
// command are returned unchanged.
func interspersed(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	tail := args[1:]
	complete := false
	if app.EnableBashCompletion && tail[len(tail)-1] == completionFlag {
		complete, tail = true, tail[:len(tail)-1]
	}
	out := append([]string{args[0]}, reorder(app.Flags, app.Commands, tail, true)...)
	if complete {
		out = append(out, completionFlag)
	}
	return out
}

// reorder handles the arguments after one level's name: flags of that level,
// then either a subcommand's name and its arguments (handled recursively) or
// the level's own positional arguments. At the top (the app), a line naming
// no command is left alone.
func reorder(flags []ucli.Flag, cmds []*ucli.Command, args []string, top bool) []string {
	// The first positional argument may name a subcommand (urfave/cli gives
	// every command a "help" subcommand once it has run).
	for i := 0; i < len(args) && len(cmds) > 0; i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if isFlag(a) {
			if flagTakesValue(flags, a) {
				i++
			}
			continue
		}
		for _, c := range cmds {
			if c.HasName(a) {
				return append(append([]string{}, args[:i+1]...), reorder(c.Flags, c.Subcommands, args[i+1:], false)...)
			}
		}
		break
	}
	if top {
		return args
	}
	var flagArgs, positional []string
	dashdash := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			dashdash = true
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case isFlag(a):
			flagArgs = append(flagArgs, a)
			if flagTakesValue(flags, a) && i+1 < len(args) {
				i++
				flagArgs = append(flagArgs, args[i])
			}
		default:
			positional = append(positional, a)
		}
	}
	if len(positional) == 0 {
		return flagArgs
	}
	needDash := dashdash
	for _, p := range positional {
		if isFlag(p) {
			needDash = true
		}
	}
	if needDash {
		flagArgs = append(flagArgs, "--")
	}
	return append(flagArgs, positional...)
}

// isFlag reports whether a looks like a flag (the flag package's rule: a
// leading '-' and more; "-" alone is an argument).
func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// flagTakesValue reports whether flag argument a (like "-n", "--tz",
// "--tz=UTC") consumes the next argument as its value.
func flagTakesValue(flags []ucli.Flag, a string) bool {
	name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if df, ok := f.(ucli.DocGenerationFlag); ok {
				return df.TakesValue()
			}
			return true
		}
	}
	return false // unknown (or help): let urfave/cli report it
}

// setCompletion gives the app and every command a completion function that
// reads the command line it was given: urfave/cli's default reads os.Args,
// which is wrong when Run is called with other arguments (tests, embedding).
// The line's word before --generate-bash-completion decides: a word starting
// with '-' asks for the flags of the command, anything else for its
// subcommands.
func setCompletion(app *ucli.App, args []string) {
	prev := ""
	if len(args) > 2 {
		prev = args[len(args)-2]
	}
	suggest := func(flags []ucli.Flag, cmds []*ucli.Command) func(*ucli.Context) {
		return func(c *ucli.Context) {
			w := c.App.Writer
			if isFlag(prev) {
				for _, f := range flags {
					if v, ok := f.(ucli.VisibleFlag); ok && !v.IsVisible() {
						continue // accepted, but not offered
					}
					for _, n := range f.Names() {
						dashed := "--" + n
						if len(n) == 1 {
							dashed = "-" + n
						}
						if strings.HasPrefix(dashed, prev) {
							fmt.Fprintln(w, dashed)
						}
					}
				}
				return
			}
			for _, cmd := range cmds {
				if !cmd.Hidden {
					for _, n := range cmd.Names() {
						fmt.Fprintln(w, n)
					}
				}
			}
		}
	}
	app.BashComplete = suggest(app.Flags, app.Commands)
	var walk func([]*ucli.Command)
	walk = func(cmds []*ucli.Command) {
		for _, cmd := range cmds {
			cmd.BashComplete = suggest(cmd.Flags, cmd.Subcommands)
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
}
