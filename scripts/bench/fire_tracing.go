package main

// The fire benchmark's tracing setting (-tracing off,on): with tracing on
// the daemons export their spans over OTLP/HTTP to a receiver the bench
// runs on loopback (internal/tracing/tracingtest, counting only), and each
// burst reports the spans received and the daemons' CPU per fire.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/tracing"
	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
)

// The -tracing settings.
const (
	tracingOff = "off"
	tracingOn  = "on"
)

// traceSettle is added to the last burst's settle time when a run has
// tracing on (for either setting, so that the windows compare): the batch
// span processor exports every 5 s (OTEL_BSP_SCHEDULE_DELAY) unless its
// batch fills, so a burst's last spans arrive up to 5 s after its last fire.
const traceSettle = 6 * time.Second

// hasTracingOn reports whether any of the settings is on.
func hasTracingOn(settings []string) bool { return slices.Contains(settings, tracingOn) }

// spanReceiver is the bench's OTLP/HTTP receiver on loopback.
type spanReceiver struct {
	rcv *tracingtest.Receiver
	srv *http.Server
	url string
}

// startSpanReceiver starts a counting OTLP/HTTP receiver on a free
// loopback port.
func startSpanReceiver() (*spanReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &spanReceiver{rcv: &tracingtest.Receiver{CountOnly: true}, url: "http://" + ln.Addr().String()}
	r.srv = &http.Server{Handler: r.rcv, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("span receiver: %v", err)
		}
	}()
	return r, nil
}

// counts returns the spans received so far per name; none for a nil
// receiver (tracing off).
func (r *spanReceiver) counts() map[string]int {
	if r == nil {
		return nil
	}
	return r.rcv.Counts()
}

// close stops the receiver.
func (r *spanReceiver) close() {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// daemonEnv is the environment of a daemon for a tracing setting: for ""
// nil (the bench's own, as it is); otherwise the bench's without any
// OTEL_* variable, and for on the receiver's endpoint over OTLP/HTTP plus
// extra (KEY=VALUE, which win).
func daemonEnv(setting, endpoint string, extra []string) []string {
	if setting == "" {
		return nil
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	if setting == tracingOn {
		env = append(env, tracing.EnvEndpoint+"="+endpoint, tracing.EnvProtocol+"="+tracing.ProtocolHTTP)
		env = append(env, extra...)
	}
	return env
}

// daemonCPU is the daemons' user + system CPU time so far, summed (a
// daemon whose /proc/<pid>/stat cannot be read counts 0).
func daemonCPU(ds []*daemon) time.Duration {
	var ticks int64
	for _, d := range ds {
		if d.cmd.Process != nil {
			ticks += cpuTicks(d.cmd.Process.Pid)
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// countsDelta is after − before per name, names with no change left out.
func countsDelta(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for name, n := range after {
		if d := n - before[name]; d != 0 {
			out[name] = d
		}
	}
	return out
}
