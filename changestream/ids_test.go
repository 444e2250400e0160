package changestream

import (
	"slices"
	"testing"

	"github.com/cronswap/cronswap/schedule"
)

// The ids a full reload or a drift report logs are shown as people read
// them: the key of a document whose _id is no job id by its rendering,
// without the marker byte that is not text; at most n of them.
func TestFirstIDsShowsKeys(t *testing.T) {
	ids := []string{"daily_report", schedule.RefusedKey(`{"$oid":"6b15bf4bd39b7c80efbaba42"}`), "warm_cache"}
	if got, want := firstIDs(ids, 20), []string{"daily_report", `_id {"$oid":"6b15bf4bd39b7c80efbaba42"}`, "warm_cache"}; !slices.Equal(got, want) {
		t.Fatalf("firstIDs = %q, want %q", got, want)
	}
	if got := firstIDs(ids, 1); !slices.Equal(got, []string{"daily_report"}) {
		t.Fatalf("firstIDs(ids, 1) = %q", got)
	}
	if ids[1] != schedule.RefusedKey(`{"$oid":"6b15bf4bd39b7c80efbaba42"}`) {
		t.Fatal("firstIDs changed its argument")
	}
}
