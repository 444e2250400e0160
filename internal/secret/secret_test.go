package secret

import (
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
)

func env(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestExpanderExpandsAndNamesEveryUnsetVariableOnce(t *testing.T) {
	x := NewExpander(env(map[string]string{"TOKEN": "s3cr3t-value", "EMPTY": ""}))
	if got := x.Expand("Bearer ${TOKEN}"); got != "Bearer s3cr3t-value" {
		t.Errorf("Expand = %q", got)
	}
	if got := x.Expand("[${EMPTY}]"); got != "[]" {
		t.Errorf("a variable set to the empty string expands to it: %q", got)
	}
	if got := x.Expand("$TOKEN ${TOKEN"); got != "$TOKEN ${TOKEN" {
		t.Errorf("what is not a ${NAME} reference is left as written: %q", got)
	}
	if err := x.Err(); err != nil {
		t.Fatalf("Err = %v, want nil", err)
	}
	x.Expand("${B_UNSET}/${A_UNSET}/${B_UNSET}")
	err := x.Err()
	var ue *UnsetError
	if !errors.As(err, &ue) || err.Error() != "environment variable A_UNSET, B_UNSET not set" {
		t.Fatalf("Err = %v, want both unset names, sorted, once", err)
	}
	if v := x.Values(); len(v) != 2 || v[0] != "s3cr3t-value" {
		t.Errorf("Values = %q, want the substituted values", v)
	}
}

func TestRefsAndSyntax(t *testing.T) {
	if got := Refs("${A}-${B_1}-${A}"); strings.Join(got, ",") != "A,B_1" {
		t.Errorf("Refs = %q", got)
	}
	for _, ok := range []string{"", "plain", "Bearer ${TOKEN}", "$HOME", "a $ b", "${A}${B}"} {
		if err := CheckSyntax(ok); err != nil {
			t.Errorf("CheckSyntax(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"Bearer ${TOKEN", "${BAD-NAME}", "${1X}", "${}", "x ${A} ${ B}"} {
		if err := CheckSyntax(bad); err == nil || !strings.Contains(err.Error(), "does not start a ${NAME} reference") {
			t.Errorf("CheckSyntax(%q) = %v, want a refusal", bad, err)
		}
	}
}

func TestRedactorMasksValuesAndTheirEncodings(t *testing.T) {
	r := NewRedactor("tok/en+1&2\"x", "abc", "")
	basic := base64.StdEncoding.EncodeToString([]byte("user:pa55word"))
	r.Add("pa55word", basic)
	in := strings.Join([]string{
		"raw tok/en+1&2\"x",
		`json "tok/en+1&2\"x"`,
		"query tok%2Fen%2B1%262%22x",
		"header Basic " + basic,
		"decoded user:pa55word",
		"short abc stays",
	}, "\n")
	out := r.Redact(in)
	for _, leak := range []string{"tok/en", "tok%2Fen", "pa55word", basic} {
		if strings.Contains(out, leak) {
			t.Errorf("redacted text still holds %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "short abc stays") {
		t.Errorf("a value shorter than MinRedactLen was masked:\n%s", out)
	}
	if strings.Count(out, Mask) != 5 {
		t.Errorf("want 5 masks:\n%s", out)
	}
}

// Where one known value contains another, the longer one is masked whole.
func TestRedactorLongestFirst(t *testing.T) {
	r := NewRedactor("secret", "secret-and-more")
	if got := r.Redact("x secret-and-more y secret z"); got != "x "+Mask+" y "+Mask+" z" {
		t.Errorf("Redact = %q", got)
	}
	if r.Longest() != len("secret-and-more") {
		t.Errorf("Longest = %d", r.Longest())
	}
}

func TestRedactorZeroAndNil(t *testing.T) {
	var nilR *Redactor
	nilR.Add("whatever")
	if nilR.Redact("whatever") != "whatever" || nilR.Longest() != 0 {
		t.Error("a nil Redactor changes nothing")
	}
	var zero Redactor
	if zero.Redact("whatever") != "whatever" {
		t.Error("the zero Redactor knows nothing")
	}
	zero.Add("whatever")
	if zero.Redact("whatever") != Mask {
		t.Error("the zero Redactor learns")
	}
}

func TestRedactorConcurrentAddAndRedact(t *testing.T) {
	r := NewRedactor()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				r.Add(strings.Repeat("k", 4+i) + string(rune('a'+j%26)))
				_ = r.Redact("kkkka kkkkkb")
			}
		})
	}
	wg.Wait()
	if got := r.Redact("kkkka"); got != Mask {
		t.Errorf("Redact = %q", got)
	}
}
