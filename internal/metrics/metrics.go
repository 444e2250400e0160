// Package metrics defines cronswap's Prometheus metrics (all named
// cronswap_*) on a registry the caller owns, and the /metrics handler.
//
// The packages that do the work (scheduler, changestream, jobs) know nothing
// of Prometheus: they report through hooks, and the daemon glues those hooks
// to the methods here. Every method is safe on a nil *Metrics, which records
// nothing, so tests and embedders can leave metrics out.
package metrics

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cronswap/cronswap/internal/firepath"
)

// Namespace prefixes every metric name.
const Namespace = "cronswap"

// Reload results counted by ReloadsTotal.
const (
	ReloadApplied   = "applied"
	ReloadUnchanged = "unchanged"
	ReloadRejected  = "rejected"
	ReloadRemoved   = "removed"
)

// Metrics holds every cronswap metric. Create it with New.
type Metrics struct {
	// reg holds the metrics; gather serves them at Handler (nil: not
	// served here).
	reg    prometheus.Registerer
	gather prometheus.Gatherer

	// ChangeEvents counts change events applied, by operation.
	ChangeEvents *prometheus.CounterVec
	// Reloads counts per-job engine updates, by result.
	Reloads *prometheus.CounterVec
	// FullReloads counts full reloads of the collection, by reason.
	FullReloads *prometheus.CounterVec
	// ResyncDrift counts jobs a periodic resync found out of step with the
	// collection (should stay 0).
	ResyncDrift prometheus.Counter
	// StreamReconnects counts change stream re-opens after an error.
	StreamReconnects prometheus.Counter
	// EditToArmed is the time from a write (the change event's wall time,
	// else the document's updated_at) to the new timer being armed.
	EditToArmed prometheus.Histogram
	// EventApply is the time from receiving a change event to the engine
	// having armed or disarmed the job, before the change is logged: the
	// daemon's own share of EditToArmed.
	EventApply prometheus.Histogram
	// FireLateness is dispatch time minus when the fire was due, by the
	// schedule's category (bounded: see Known.Categories).
	FireLateness *prometheus.HistogramVec
	// lateness holds FireLateness's observer of each known category (see
	// Preset); fixed before the first fire.
	lateness map[string]prometheus.Observer
	// Runs counts finished fires by job and status (succeeded, failed,
	// retrying, skipped, abandoned).
	Runs *prometheus.CounterVec
	// LockAcquisitions counts claims by result (firepath.ClaimedResults).
	LockAcquisitions *prometheus.CounterVec
	// FiresNotRun counts fires that were not run for a reason other than
	// another replica having them, by reason (firepath.NotRunReasons).
	FiresNotRun *prometheus.CounterVec
	// MissedSlots counts the slots of the missed records this replica
	// wrote, by reason: a record of a range of 40 slots counts 40. Summed
	// over the replicas it counts each missed slot once.
	MissedSlots *prometheus.CounterVec
	// ClaimBatchSize is the number of fires in each claim batch.
	ClaimBatchSize prometheus.Histogram
	// ClaimBatchSeconds is how long each claim batch took, from its first
	// request to the last answer.
	ClaimBatchSeconds prometheus.Histogram
	// OwnerTakeovers counts fires this replica claimed and won although
	// another member owned the job (the owner had not claimed within the
	// grace: dead, stalled or not yet seen gone).
	OwnerTakeovers prometheus.Counter
	// Notifications counts notification deliveries by sink and result
	// (NotificationDelivered, NotificationFailed, NotificationGivenUp).
	Notifications *prometheus.CounterVec
	// SkippedFires counts the fires this replica recorded skipped, by
	// reason (firepath.SkipReasons).
	SkippedFires *prometheus.CounterVec
	// Triggers counts the outcomes this replica wrote on run-now and
	// backfill requests, by outcome (the request's status: buffered and
	// the final ones).
	Triggers *prometheus.CounterVec
}

// Sources are read at scrape time for the gauges (see RegisterGauges); any
// may be nil, which leaves its gauge out.
type Sources struct {
	// Armed returns the number of jobs with an armed timer.
	Armed func() int
	// Known returns the number of jobs the engine keeps, armed here or
	// not (with the schedules divided, the others are armed elsewhere).
	Known func() int
	// Rejected returns the number of jobs whose latest document is
	// refused, armed on a last known good or not.
	Rejected func() int
	// TokenSavedAt returns when the resume token was last saved (zero
	// before the first save).
	TokenSavedAt func() time.Time
	// ClaimLatency returns the fire path's claim-latency estimate (0 while
	// there is none).
	ClaimLatency func() time.Duration
	// WatchState returns the schedules watcher's state: WatchStreaming,
	// WatchPolling or WatchLost.
	WatchState func() string
	// LiveMembers returns the number of live members this replica sees,
	// itself included.
	LiveMembers func() int
	// HeartbeatAge returns the time since this replica's membership
	// heartbeat was last written (since it started trying, before the
	// first).
	HeartbeatAge func() time.Duration
}

// New creates the metrics on a fresh registry that also carries the Go
// runtime and process collectors, and serves that registry at Handler: the
// cronswap binary's /metrics. The gauges read from the parts they describe
// are added by RegisterGauges once those parts exist.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := NewOn(reg, reg)
	if err != nil {
		panic(err) // a fresh registry holds no cronswap metric yet
	}
	return m
}

// NewOn creates the metrics on reg, a registerer the caller owns (a
// service embedding cronswap), without the Go runtime and process
// collectors, which are reg's owner's to add. Handler serves gather (nil:
// Handler is nil, and the owner serves reg itself). It fails when reg
// already holds a cronswap metric, such as another instance's in the same
// process: give each its own registerer, or wrap one with
// prometheus.WrapRegistererWith and a label telling them apart.
func NewOn(reg prometheus.Registerer, gather prometheus.Gatherer) (*Metrics, error) {
	f := &factory{reg: reg}
	m := &Metrics{
		reg:    reg,
		gather: gather,
		ChangeEvents: f.counterVec(prometheus.CounterOpts{Name: "change_events_total",
			Help: "Change events applied, by operation."}, "operation"),
		Reloads: f.counterVec(prometheus.CounterOpts{Name: "reloads_total",
			Help: "Per-job engine updates by change events, by result (applied, unchanged, removed); rejected: jobs whose document became refused, by an event or a full read alike, once until a valid one clears it."}, "result"),
		FullReloads: f.counterVec(prometheus.CounterOpts{Name: "full_reloads_total",
			Help: "Full reloads of the schedules collection, by reason."}, "reason"),
		ResyncDrift: f.counter(prometheus.CounterOpts{Name: "resync_drift_total",
			Help: "Jobs a periodic resync found out of step with the collection (should stay 0)."}),
		StreamReconnects: f.counter(prometheus.CounterOpts{Name: "stream_reconnects_total",
			Help: "Change stream re-opens after an error."}),
		EditToArmed: f.histogram(prometheus.HistogramOpts{Name: "edit_to_armed_seconds",
			Help:    "Time from a write (event wall time, else updated_at) to the new timer being armed.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		EventApply: f.histogram(prometheus.HistogramOpts{Name: "event_apply_seconds",
			Help:    "Time from receiving a change event to the engine having armed or disarmed the job.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .00075, .001, .0015, .002, .0025, .005, .01, .05}}),
		FireLateness: f.histogramVec(prometheus.HistogramOpts{Name: "fire_lateness_seconds",
			Help:    "Dispatch time minus when the fire was due (its slot plus its planned jitter), by schedule category (the config's categories, none, other).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, "category"),
		Runs: f.counterVec(prometheus.CounterOpts{Name: "runs_total",
			Help: "Finished fires and attempts by job and status (succeeded, failed, retrying: failed and to be retried, skipped, abandoned)."}, "job_id", "status"),
		LockAcquisitions: f.counterVec(prometheus.CounterOpts{Name: "lock_acquisitions_total",
			Help: "Claims of fires by result " + listed(firepath.ClaimedResults()) + "."}, "result"),
		FiresNotRun: f.counterVec(prometheus.CounterOpts{Name: "fires_not_run_total",
			Help: "Fires not run for a reason other than another replica having them, by reason " + listed(firepath.NotRunReasons) + "."}, "reason"),
		MissedSlots: f.counterVec(prometheus.CounterOpts{Name: "missed_slots_total",
			Help: "Slots recorded missed in job_runs by this replica, by reason (a range of n slots counts n)."}, "reason"),
		ClaimBatchSize: f.histogram(prometheus.HistogramOpts{Name: "claim_batch_size",
			Help: "Fires per claim batch.",
			// 1, 2, 5 per decade, 1 to 100,000 fires (a burst of 100,000
			// due in the same second on one replica is the largest batch
			// measured).
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}}),
		ClaimBatchSeconds: f.histogram(prometheus.HistogramOpts{Name: "claim_batch_seconds",
			Help:    "Time one claim batch took, first request to last answer.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		OwnerTakeovers: f.counter(prometheus.CounterOpts{Name: "owner_takeovers_total",
			Help: "Fires claimed and won by this replica although another member owned the job (owner dead or stalled)."}),
		Notifications: f.counterVec(prometheus.CounterOpts{Name: "notifications_total",
			Help: "Notification deliveries by this replica, by sink and result (delivered, failed: to be retried, given_up)."}, "sink", "result"),
		SkippedFires: f.counterVec(prometheus.CounterOpts{Name: "fires_skipped_total",
			Help: "Fires this replica recorded skipped, by reason " + listed(firepath.SkipReasons) + "."}, "reason"),
		Triggers: f.counterVec(prometheus.CounterOpts{Name: "triggers_total",
			Help: "Outcomes this replica wrote on run-now and backfill requests, by outcome (buffered, succeeded, failed, abandoned, skipped, missed, rejected, not_run, already_ran)."}, "outcome"),
	}
	if f.err != nil {
		return nil, fmt.Errorf("register the cronswap metrics: %w", f.err)
	}
	return m, nil
}

// listed is a help text's list of a label's values: "(a, b, c)". The
// values are those the fire path's hooks pass, named where they are
// defined, so that the help text cannot drift from what is counted.
func listed(values []string) string { return "(" + strings.Join(values, ", ") + ")" }

// RegisterGauges adds the gauges read from src at scrape time. Call it once,
// after the parts src reads from were created. It fails when the registerer
// already holds one of them (see NewOn).
func (m *Metrics) RegisterGauges(src Sources) error {
	f := &factory{reg: m.reg}
	if src.Armed != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "schedules_armed",
			Help: "Jobs with an armed timer on this replica."}, func() float64 { return float64(src.Armed()) }))
	}
	if src.Known != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "schedules_known",
			Help: "Jobs this replica keeps (their last known good), armed here or, with the schedules divided, elsewhere."},
			func() float64 { return float64(src.Known()) }))
	}
	if src.Rejected != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "schedules_rejected",
			Help: "Jobs whose latest document is refused (bad document, or refused by the configuration), armed on their last known good or not."},
			func() float64 { return float64(src.Rejected()) }))
	}
	if src.TokenSavedAt != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "resume_token_age_seconds",
			Help: "Seconds since the resume token was last saved (0 before the first save)."}, func() float64 {
			t := src.TokenSavedAt()
			if t.IsZero() {
				return 0
			}
			return time.Since(t).Seconds()
		}))
	}
	if src.ClaimLatency != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "claim_latency_estimate_seconds",
			Help: "The claim-latency estimate: 90th percentile of the recent claim batches' durations (0 while there is none)."},
			func() float64 { return src.ClaimLatency().Seconds() }))
	}
	if src.WatchState != nil {
		for _, state := range WatchStates {
			f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "watch_state",
				Help:        "1 for the schedules watcher's current state (streaming, polling, lost), 0 for the others.",
				ConstLabels: prometheus.Labels{"state": state}},
				func() float64 {
					if src.WatchState() == state {
						return 1
					}
					return 0
				}))
		}
	}
	if src.LiveMembers != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "members_live",
			Help: "Live members this replica sees, itself included."}, func() float64 { return float64(src.LiveMembers()) }))
	}
	if src.HeartbeatAge != nil {
		f.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "heartbeat_age_seconds",
			Help: "Seconds since this replica last wrote its membership heartbeat (since it started, before the first)."},
			func() float64 { return src.HeartbeatAge().Seconds() }))
	}
	if f.err != nil {
		return fmt.Errorf("register the cronswap gauges: %w", f.err)
	}
	return nil
}

// Gatherer returns what Handler serves (nil when it serves nothing), to
// gather the metrics in tests.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.gather }

// Handler serves the metrics in the Prometheus text format, or in the
// OpenMetrics format (which carries the exemplars) to a scrape that asks
// for it; nil when the metrics were created on a registerer without a
// gatherer (NewOn).
func (m *Metrics) Handler() http.Handler {
	if m.gather == nil {
		return nil
	}
	return promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// ObserveEditToArmed records the time from a write to its timer being armed.
// A zero written time (unknown) records nothing.
func (m *Metrics) ObserveEditToArmed(written, armed time.Time) {
	if m == nil || written.IsZero() {
		return
	}
	d := armed.Sub(written)
	if d < 0 {
		d = 0 // clocks of server and daemon disagree; count it as instant
	}
	m.EditToArmed.Observe(d.Seconds())
}

// ObserveEventApply records how long applying one change event took.
func (m *Metrics) ObserveEventApply(d time.Duration) {
	if m == nil {
		return
	}
	m.EventApply.Observe(d.Seconds())
}

// ObserveFireLateness records dispatch time minus when the fire was due,
// under the schedule's category (bounded as Known.Categories says). A
// traced fire (traceID not empty) is the bucket's exemplar, shown to a
// scrape that negotiates OpenMetrics.
func (m *Metrics) ObserveFireLateness(category string, due, dispatched time.Time, traceID string) {
	if m == nil {
		return
	}
	o := m.latenessObserver(category)
	v := max(dispatched.Sub(due), 0).Seconds()
	if eo, ok := o.(prometheus.ExemplarObserver); ok && traceID != "" {
		eo.ObserveWithExemplar(v, prometheus.Labels{ExemplarTraceID: traceID})
		return
	}
	o.Observe(v)
}

// ExemplarTraceID is the label of an exemplar naming its trace.
const ExemplarTraceID = "trace_id"

// CountChangeEvent counts one applied change event.
func (m *Metrics) CountChangeEvent(operation string) {
	if m == nil {
		return
	}
	m.ChangeEvents.WithLabelValues(operation).Inc()
}

// CountReload counts one per-job engine update by result.
func (m *Metrics) CountReload(result string) {
	if m == nil {
		return
	}
	m.Reloads.WithLabelValues(result).Inc()
}

// CountFullReload counts one full reload by reason.
func (m *Metrics) CountFullReload(reason string) {
	if m == nil {
		return
	}
	m.FullReloads.WithLabelValues(reason).Inc()
}

// CountResyncDrift adds n drifted jobs found by a resync.
func (m *Metrics) CountResyncDrift(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.ResyncDrift.Add(float64(n))
}

// CountReconnect counts one stream re-open.
func (m *Metrics) CountReconnect() {
	if m == nil {
		return
	}
	m.StreamReconnects.Inc()
}

// CountRun counts one finished fire of job by status.
func (m *Metrics) CountRun(jobID, status string) {
	if m == nil {
		return
	}
	m.Runs.WithLabelValues(jobID, status).Inc()
}

// CountLockAcquisition counts one lock attempt by result.
func (m *Metrics) CountLockAcquisition(result string) {
	if m == nil {
		return
	}
	m.LockAcquisitions.WithLabelValues(result).Inc()
}

// CountSkippedFire counts one fire recorded skipped, by reason.
func (m *Metrics) CountSkippedFire(reason string) {
	if m == nil {
		return
	}
	m.SkippedFires.WithLabelValues(reason).Inc()
}

// CountFireNotRun counts one fire not run, by reason.
func (m *Metrics) CountFireNotRun(reason string) {
	if m == nil {
		return
	}
	m.FiresNotRun.WithLabelValues(reason).Inc()
}

// factory creates metrics in the cronswap namespace and registers them,
// keeping the first registration error.
type factory struct {
	reg prometheus.Registerer
	err error
}

func (f *factory) register(c prometheus.Collector) {
	if err := f.reg.Register(c); err != nil && f.err == nil {
		f.err = err
	}
}

func (f *factory) counter(o prometheus.CounterOpts) prometheus.Counter {
	o.Namespace = Namespace
	c := prometheus.NewCounter(o)
	f.register(c)
	return c
}

func (f *factory) counterVec(o prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
	o.Namespace = Namespace
	c := prometheus.NewCounterVec(o, labels)
	f.register(c)
	return c
}

func (f *factory) histogramVec(o prometheus.HistogramOpts, labels ...string) *prometheus.HistogramVec {
	o.Namespace = Namespace
	h := prometheus.NewHistogramVec(o, labels)
	f.register(h)
	return h
}

func (f *factory) histogram(o prometheus.HistogramOpts) prometheus.Histogram {
	o.Namespace = Namespace
	h := prometheus.NewHistogram(o)
	f.register(h)
	return h
}

// CountMissedSlots counts n slots recorded missed for reason.
func (m *Metrics) CountMissedSlots(reason string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.MissedSlots.WithLabelValues(reason).Add(float64(n))
}

// ObserveClaimBatch records one claim batch: its number of fires and how
// long it took. An empty batch records nothing.
func (m *Metrics) ObserveClaimBatch(size int, took time.Duration) {
	if m == nil || size <= 0 {
		return
	}
	m.ClaimBatchSize.Observe(float64(size))
	m.ClaimBatchSeconds.Observe(max(took, 0).Seconds())
}

// CountOwnerTakeover counts one fire won by this replica for a job another
// member owned.
func (m *Metrics) CountOwnerTakeover() {
	if m == nil {
		return
	}
	m.OwnerTakeovers.Inc()
}
