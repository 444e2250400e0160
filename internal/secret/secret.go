// Package secret holds the configuration's rules for secret values: a
// ${NAME} reference to the daemon's environment, expanded where it is used
// and refused at start when the variable is not set (the notification
// webhooks and the actions both follow it), and the redaction of known
// secret values from what a run captures before it is stored or shown.
package secret

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Lookup reads one variable of the daemon's environment, as os.LookupEnv
// does.
type Lookup func(name string) (value string, ok bool)

// ref matches one ${NAME} reference: a letter or underscore, then letters,
// digits and underscores.
var ref = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Refs returns the variables text names as ${NAME}, in order of first
// appearance, each once.
func Refs(text string) []string {
	var names []string
	for _, m := range ref.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// CheckSyntax refuses a "${" in text that does not start a ${NAME}
// reference, such as "${TOKEN" or "${BAD-NAME}": it would otherwise be sent
// as it is written, with the secret missing.
func CheckSyntax(text string) error {
	rest := ref.ReplaceAllString(text, "")
	if i := strings.Index(rest, "${"); i >= 0 {
		return fmt.Errorf("%q does not start a ${NAME} reference (NAME: letters, digits and _, not starting with a digit, closed by })",
			rest[i:min(len(rest), i+24)])
	}
	return nil
}

// Expander replaces ${NAME} references in several texts with the values of
// its Lookup, and remembers what it could not: Err names every unset
// variable once. Values lists what it substituted (the secrets a caller
// redacts).
type Expander struct {
	lookup  Lookup
	missing []string
	values  []string
}

// NewExpander returns an Expander reading variables with lookup.
func NewExpander(lookup Lookup) *Expander { return &Expander{lookup: lookup} }

// Expand returns text with every ${NAME} replaced by its value; an unset
// variable becomes the empty string and is reported by Err.
func (x *Expander) Expand(text string) string {
	return ref.ReplaceAllStringFunc(text, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := x.lookup(name)
		if !ok {
			if !slices.Contains(x.missing, name) {
				x.missing = append(x.missing, name)
			}
			return ""
		}
		x.values = append(x.values, v)
		return v
	})
}

// Values returns the values Expand substituted so far.
func (x *Expander) Values() []string { return x.values }

// Err returns an *UnsetError naming the variables Expand found unset, or
// nil.
func (x *Expander) Err() error {
	if len(x.missing) == 0 {
		return nil
	}
	names := slices.Clone(x.missing)
	slices.Sort(names)
	return &UnsetError{Names: names}
}

// UnsetError names the environment variables a configuration refers to
// that are not set.
type UnsetError struct {
	Names []string
}

func (e *UnsetError) Error() string {
	return fmt.Sprintf("environment variable %s not set", strings.Join(e.Names, ", "))
}
