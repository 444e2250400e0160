package pace

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A rest lasts RestFactor times the read (a timer never fires early), and
// ends at once when the reader is stopped or its context ends.
func TestRest(t *testing.T) {
	t.Parallel()
	took := 20 * time.Millisecond
	began := time.Now()
	if err := Rest(context.Background(), took, nil); err != nil {
		t.Fatal(err)
	}
	if rested := time.Since(began); rested < RestFactor*took {
		t.Errorf("rested %v after a read of %v, want at least %v", rested, took, RestFactor*took)
	}

	stop := make(chan struct{})
	close(stop)
	if err := Rest(context.Background(), time.Hour, stop); err != nil {
		t.Errorf("stopped: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Rest(ctx, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("context ended: %v, want %v", err, context.Canceled)
	}
}
