package actions

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/buildinfo"
	"github.com/cronswap/cronswap/internal/tracecontext"
	"github.com/cronswap/cronswap/jobs"
)

// runField is one thing the daemon tells every action about its run: an
// http action gets it as a request header, an exec action as an
// environment variable (an empty name: not told that way).
type runField struct {
	header string
	env    string
	// value returns the field's value for run f, whose action runs with
	// ctx; false leaves it out.
	value func(ctx context.Context, f jobs.Run) (string, bool)
}

// runFields is the one list of the headers and variables the daemon sets
// on every run. They are the daemon's: a configured header or env entry
// of one of these names is refused at config load, and the daemon sets
// its values after the configured ones, so they win. A feature that
// tells actions more adds an entry here; the header prefix XHeaderPrefix
// and the variable prefix EnvPrefix are reserved whole.
var runFields = []runField{
	{header: XHeaderPrefix + "Job-Id", env: EnvPrefix + "JOB_ID", value: func(_ context.Context, f jobs.Run) (string, bool) { return f.JobID, true }},
	{header: XHeaderPrefix + "Scheduled-At", env: EnvPrefix + "SCHEDULED_AT", value: func(_ context.Context, f jobs.Run) (string, bool) {
		return f.Slot.UTC().Format(time.RFC3339), true
	}},
	{header: XHeaderPrefix + "Run-Id", env: EnvPrefix + "RUN_ID", value: func(_ context.Context, f jobs.Run) (string, bool) { return f.RunID, true }},
	{header: XHeaderPrefix + "Fence", env: EnvPrefix + "FENCE", value: func(_ context.Context, f jobs.Run) (string, bool) {
		return strconv.FormatInt(f.Fence, 10), true
	}},
	{header: XHeaderPrefix + "Instance-Id", env: EnvPrefix + "INSTANCE_ID", value: func(_ context.Context, f jobs.Run) (string, bool) { return f.InstanceID, true }},
	{env: EnvPrefix + "ARGS", value: func(_ context.Context, f jobs.Run) (string, bool) { return string(argsJSON(f)), true }},
	// The attempt of an action that retries (1 the first); absent for one
	// that does not.
	{header: XHeaderPrefix + "Attempt", env: EnvPrefix + "ATTEMPT", value: func(_ context.Context, f jobs.Run) (string, bool) {
		return strconv.Itoa(f.Attempt), f.Attempt > 0
	}},
	// The run id is the same in every attempt of a slot, and on every
	// replica: a receiver that sees a retry, or a second attempt, sees
	// the same key.
	{header: "Idempotency-Key", value: func(_ context.Context, f jobs.Run) (string, bool) { return f.RunID, true }},
	{header: "User-Agent", value: func(context.Context, jobs.Run) (string, bool) { return "cronswap/" + buildinfo.String(), true }},
	// The W3C trace context of the run's span, when tracing is on: the
	// action's own spans continue the fire's trace.
	{header: "Traceparent", env: "TRACEPARENT", value: func(ctx context.Context, _ jobs.Run) (string, bool) {
		v := tracecontext.CarrierOf(ctx).TraceParent
		return v, v != ""
	}},
	{header: "Tracestate", env: "TRACESTATE", value: func(ctx context.Context, _ jobs.Run) (string, bool) {
		v := tracecontext.CarrierOf(ctx).TraceState
		return v, v != ""
	}},
}

// Reserved name prefixes: every header starting with XHeaderPrefix and
// every variable starting with EnvPrefix is the daemon's.
const (
	XHeaderPrefix = "X-Cronswap-"
	EnvPrefix     = "CRONSWAP_"
)

// Env returns the environment variables describing run f, as an exec
// action's program sees them (runFields): job id, slot (RFC 3339, UTC),
// run id, fence, instance id and the args as JSON, the attempt when the
// action retries, and the trace context of ctx's span when it has one.
func Env(ctx context.Context, f jobs.Run) []string {
	var env []string
	for _, rf := range runFields {
		if v, ok := rf.value(ctx, f); ok && rf.env != "" {
			env = append(env, rf.env+"="+v)
		}
	}
	return env
}

// setRunHeaders sets the headers describing run f (runFields), whose
// request is sent with ctx, on h, over any of the same name.
func setRunHeaders(ctx context.Context, h http.Header, f jobs.Run) {
	for _, rf := range runFields {
		if rf.header == "" {
			continue
		}
		if v, ok := rf.value(ctx, f); ok {
			h.Set(rf.header, v)
		} else {
			h.Del(rf.header)
		}
	}
}

// daemonHeader reports whether a header of this name is the daemon's
// (runFields, or the reserved prefix).
func daemonHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return strings.HasPrefix(c, XHeaderPrefix) || slices.ContainsFunc(runFields, func(rf runField) bool { return rf.header != "" && rf.header == c })
}

// daemonVariable reports whether a variable of this name is the daemon's:
// the run's (runFields, or the reserved prefix, which also covers the
// daemon's own settings and secrets: CRONSWAP_MONGO_URI,
// CRONSWAP_HTTP_TOKEN, ...).
func daemonVariable(name string) bool {
	return strings.HasPrefix(name, EnvPrefix) || slices.ContainsFunc(runFields, func(rf runField) bool { return rf.env != "" && rf.env == name })
}
