package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronswap/cronswap/jobs"
)

// A Go function as a job's handler: it is handed the run (job, cron slot,
// run id, fence, attempt) and returns the run's outcome.
func ExampleHandlerFunc() {
	report := jobs.HandlerFunc(func(ctx context.Context, run jobs.Run) error {
		if len(run.Args) == 0 {
			return errors.New("no region given")
		}
		fmt.Printf("%s for %s, args %s, attempt %d\n", run.JobID, run.Slot.Format(time.DateOnly), run.Args, run.Attempt)
		return nil
	})
	slot := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	err := report.Handle(context.Background(), jobs.Run{JobID: "daily_report", Slot: slot,
		RunID: "daily_report@2026-11-30T06:00:00Z", Args: []byte(`{"region":"eu"}`), Attempt: 1})
	fmt.Println("error:", err)
	// Output:
	// daily_report for 2026-11-30, args {"region":"eu"}, attempt 1
	// error: <nil>
}

// A job's run policy: at most ten minutes a run, a fire while the previous
// run still runs waits for it, and a failed slot is tried twice more.
func ExamplePolicy() {
	p := jobs.Policy{
		Timeout: 10 * time.Minute,
		Overlap: jobs.OverlapBufferOne,
		Retry:   jobs.RetryPolicy{Attempts: 3, Backoff: 30 * time.Second},
	}
	fmt.Println("retry policy valid:", p.Retry.Validate() == nil)
	fmt.Println("waits for the lock:", p.Overlap.Buffers())
	fmt.Println("wait after the first failure:", p.Retry.Delay(1))
	fmt.Println("wait after the second failure:", p.Retry.Delay(2))
	// Output:
	// retry policy valid: true
	// waits for the lock: true
	// wait after the first failure: 30s
	// wait after the second failure: 1m0s
}

// Overlap policies as the configuration names them.
func ExampleParseOverlap() {
	for _, name := range []string{"", "forbid", "buffer_all", "sometimes"} {
		o, err := jobs.ParseOverlap(name)
		fmt.Printf("%q: %q %v\n", name, o, err)
	}
	// Output:
	// "": "skip" <nil>
	// "forbid": "skip" <nil>
	// "buffer_all": "buffer_all" <nil>
	// "sometimes": "" overlap "sometimes": want skip, buffer_one, buffer_all, cancel_other or allow (forbid: the former name of skip)
}
