package jobs

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseOverlap(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Overlap{"": OverlapSkip, "forbid": OverlapSkip, "skip": OverlapSkip,
		"buffer_one": OverlapBufferOne, "buffer_all": OverlapBufferAll, "cancel_other": OverlapCancelOther, "allow": OverlapAllow} {
		if got, err := ParseOverlap(in); err != nil || got != want {
			t.Errorf("ParseOverlap(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if DefaultOverlap != OverlapSkip {
		t.Errorf("DefaultOverlap = %q, want skip", DefaultOverlap)
	}
	for _, in := range []string{"sometimes", "Forbid", " allow"} {
		if _, err := ParseOverlap(in); err == nil || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("ParseOverlap(%q): err = %v, want a refusal quoting it", in, err)
		}
	}
}
