// Package refusal renders why a document was refused, in the one form the
// schedules, the blackout windows and the calendars share, so that an
// operator reads every refusal the same way in logs, on the page and from
// the command line.
package refusal

import (
	"strconv"
	"strings"
)

// Message renders a refusal as `<kind> "<name>": field <field>: <reason>`,
// leaving out the name and the field when they are empty: kind says what
// the document is ("schedule", "calendar"), name is its _id or a rendering
// of it, field the offending field.
func Message(kind, name, field, reason string) string {
	var b strings.Builder
	b.WriteString(kind)
	if name != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(name))
	}
	if field != "" {
		b.WriteString(": field ")
		b.WriteString(field)
	}
	b.WriteString(": ")
	b.WriteString(reason)
	return b.String()
}
