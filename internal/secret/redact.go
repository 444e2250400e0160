package secret

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Mask replaces a secret value in redacted text.
const Mask = "[redacted]"

// MinRedactLen is the length, in bytes, below which a value is not
// redacted: a one- to three-byte value would mask every occurrence of a
// common string (a word, a digit) and no real secret is that short.
const MinRedactLen = 4

// Redactor hides known secret values in text: each value, and its forms as
// a JSON string and in a URL query (what a receiver echoing a request
// would write). Values are added as they become known (a secret file read
// again after a rotation adds the new value; the old one stays known). It
// is safe for concurrent use; the zero value knows nothing.
type Redactor struct {
	mu       sync.RWMutex
	known    map[string]bool
	replacer *strings.Replacer
	longest  int
}

// NewRedactor returns a Redactor knowing values.
func NewRedactor(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add makes values known; values shorter than MinRedactLen, and those
// already known, are ignored.
func (r *Redactor) Add(values ...string) {
	if r == nil {
		return
	}
	var forms []string
	for _, v := range values {
		if len(v) < MinRedactLen {
			continue
		}
		forms = append(forms, v, url.QueryEscape(v), jsonString(v, true), jsonString(v, false))
	}
	if r.allKnown(forms) {
		return // the usual case at a fire: nothing new, no write lock
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, f := range forms {
		if !r.known[f] {
			if r.known == nil {
				r.known = map[string]bool{}
			}
			r.known[f] = true
			changed = true
		}
	}
	if !changed {
		return
	}
	all := make([]string, 0, len(r.known))
	for v := range r.known {
		all = append(all, v)
	}
	// Longest first: where one value contains another, the longer is
	// masked whole (the replacer tries the patterns in argument order).
	slices.SortFunc(all, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Mask)
	}
	r.replacer = strings.NewReplacer(pairs...)
	r.longest = len(all[0])
}

// allKnown reports whether every form is known already.
func (r *Redactor) allKnown(forms []string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range forms {
		if !r.known[f] {
			return false
		}
	}
	return true
}

// jsonString is v as the inside of a JSON string, with <, > and & escaped
// (as Go writes them) or not (as most other encoders do).
func jsonString(v string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(v) // a string always encodes
	s := strings.TrimSuffix(b.String(), "\n")
	return s[1 : len(s)-1]
}

// Redact returns s with every known value masked.
func (r *Redactor) Redact(s string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	rep := r.replacer
	r.mu.RUnlock()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}

// Longest returns the length of the longest known form: a text cut to
// keep n bytes is redacted with Longest()-1 bytes more around the cut, so
// that a secret straddling it is not kept in part.
func (r *Redactor) Longest() int {
	if r == nil {
		return 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.longest
}
