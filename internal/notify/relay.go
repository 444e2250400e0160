package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/tracecontext"
)

// HeaderID is the request header carrying the notification's id, by which
// a receiver de-duplicates (a delivery is at least once).
const HeaderID = "X-Cronswap-Notification-Id"

// DefaultLease is how long a claim hides a notification from the other
// relays: longer than a delivery may take (Timeout), so a live relay's
// delivery is never claimed again, short enough that a dead relay's is
// taken over soon.
const DefaultLease = time.Minute

// DefaultRetention is how long delivered and failed notifications are
// kept when Options.Retention is 0.
const DefaultRetention = 720 * time.Hour

// retryPass is the wait after a pass that failed (the database did not
// answer), instead of the poll period.
const retryPass = 5 * time.Second

// deliverers is how many deliveries a relay makes at once (a slow sink
// holds up at most this many).
const deliverers = 4

// moveLimit bounds the notices read from a source in one find, and
// moveBatches the finds of one pass.
const (
	moveLimit   = 100
	moveBatches = 20
)

// Hooks observe deliveries (metrics); nil members are skipped.
type Hooks struct {
	// Delivered is called after a sink accepted a notification.
	Delivered func(sink string)
	// Failed is called after a delivery failed; gaveUp when it was the
	// last attempt (the notification is now failed).
	Failed func(sink string, gaveUp bool)
}

// Options configure a Relay.
type Options struct {
	// Notifications is the notifications collection (Collection).
	Notifications *mongo.Collection
	// Sources are the outbox collections whose documents may carry a
	// notice under OutboxField (job_runs; a pause collection), each
	// read and cleared through the code that writes it.
	Sources []Source
	// Instance names this replica in claims and logs.
	Instance string
	// Route returns the route of a job's notices (its action's own, or
	// the global one); nil sends nothing.
	Route func(jobID string) Route
	// Settings give the timing (backoff, attempts, timeout, poll); zero
	// values take the defaults.
	Settings Settings
	// Lease is the claim lease; 0 is DefaultLease (raised to twice the
	// timeout when shorter).
	Lease time.Duration
	// Retention is how long finished notifications are kept; 0 is
	// DefaultRetention.
	Retention time.Duration
	// Client sends the requests; nil is a client without its own timeout
	// (each request is bounded by Settings.Timeout).
	Client *http.Client
	// LookupEnv resolves ${NAME} in webhooks; nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Now is the clock; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	Hooks  Hooks
	// Tracer, when set, makes a span of each delivery, in the trace of
	// the event that caused the notification (its notice's trace
	// context) when it has one. nil: no span.
	Tracer trace.Tracer
}

// Relay moves notices from the outbox documents to the notifications
// collection and delivers them (see the package doc). Run it on every
// replica; Wake makes it look at once.
type Relay struct {
	o    Options
	wake chan struct{}

	mu sync.Mutex
	// next is the earliest retry this relay scheduled and has not claimed
	// yet (zero: none known).
	next time.Time
}

// New returns a relay; nothing runs until Run.
func New(o Options) *Relay {
	s := &o.Settings
	if s.Backoff <= 0 {
		s.Backoff = DefaultBackoff
	}
	if s.MaxBackoff <= 0 {
		s.MaxBackoff = DefaultMaxBackoff
	}
	if s.MaxBackoff < s.Backoff {
		// A default cap below a long backoff (Validate refuses a given
		// one below it).
		s.MaxBackoff = s.Backoff
	}
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Poll <= 0 {
		s.Poll = DefaultPoll
	}
	if s.MaxAge <= 0 {
		s.MaxAge = DefaultMaxAge
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	o.Lease = max(o.Lease, 2*s.Timeout)
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Route == nil {
		o.Route = func(string) Route { return Route{} }
	}
	return &Relay{o: o, wake: make(chan struct{}, 1)}
}

// Wake makes the relay look for notices and due notifications at once
// (the writer of an outbox document calls it after its write); it never
// blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run moves and delivers until ctx ends: at once, on every Wake, at the
// retries it scheduled, and every Settings.Poll for what other replicas
// wrote or left (their notices, the retries of a relay that died). A pass
// that fails (database unreachable) is logged and tried again at the next
// occasion. It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	for {
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.o.Logger.Warn("notification relay pass failed", "instance_id", r.o.Instance, "error", err, "retry_in", retryPass)
			r.soon(r.o.Now().Add(retryPass))
		}
		wait := r.o.Settings.Poll
		r.mu.Lock()
		if !r.next.IsZero() {
			wait = min(wait, max(r.next.Sub(r.o.Now()), 0))
		}
		r.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// Pass moves every pending notice and delivers every due notification
// once. Commands when there is nothing to do: one find per source and one
// findOneAndUpdate.
func (r *Relay) Pass(ctx context.Context) error {
	var errs []error
	for _, src := range r.o.Sources {
		if err := r.move(ctx, src); err != nil {
			errs = append(errs, err)
		}
	}
	r.mu.Lock()
	if !r.next.IsZero() && !r.o.Now().Before(r.next) {
		r.next = time.Time{}
	}
	r.mu.Unlock()
	if err := r.deliverDue(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deliverDue delivers the due notifications, up to deliverers at once: a
// notification is claimed only when a deliverer is free (so no claim's
// lease runs while it waits), and claiming stops at the first claim that
// finds none due.
func (r *Relay) deliverDue(ctx context.Context) error {
	free := make(chan struct{}, deliverers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for ctx.Err() == nil {
		free <- struct{}{}
		c, ok, err := r.claim(ctx)
		if err != nil || !ok {
			<-free
			if err != nil {
				errs = append(errs, err)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-free }()
			if err := r.deliver(ctx, c); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// move moves the notices of src into the notifications collection, then
// removes them from their documents (conditional on the same notice, so
// a newer one written meanwhile stays). Each batch of up to moveLimit
// outbox documents costs one find, one insertMany and one bulkWrite; a
// pass moves at most moveBatches batches and leaves the rest to the next
// pass, which it schedules at once.
func (r *Relay) move(ctx context.Context, src Source) error {
	for range moveBatches {
		raws, err := src.Notices(ctx, moveLimit)
		if err != nil {
			return err // it names the collection
		}
		if err := r.moveDocs(ctx, src, raws); err != nil {
			return err
		}
		if len(raws) < moveLimit {
			return nil
		}
	}
	r.soon(r.o.Now())
	return nil
}

// soon makes the relay run again by at.
func (r *Relay) soon(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next.IsZero() || at.Before(r.next) {
		r.next = at
	}
}

// moveDocs moves the notices of the outbox documents raws of src: one
// insertMany of their notifications (a duplicate key: moved already), then
// one write of src removing the notices (and marking the bad ones).
func (r *Relay) moveDocs(ctx context.Context, src Source, raws []bson.Raw) error {
	var docs []any
	var clears []Clear
	for _, raw := range raws {
		d, clear, err := r.plan(src, raw)
		if err != nil {
			return err
		}
		docs = append(docs, d...)
		clears = append(clears, clear)
	}
	if len(docs) > 0 {
		_, err := r.o.Notifications.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		if err != nil && !onlyDuplicates(err) {
			return fmt.Errorf("write %d notifications of %s in %s: %w", len(docs), src.Name(), r.o.Notifications.Name(), err)
		}
	}
	if len(clears) > 0 {
		if err := src.ClearNotices(ctx, clears); err != nil {
			return err // it names the collection
		}
	}
	return nil
}

// noticeOf reads the notice of an outbox document leniently.
func noticeOf(raw bson.Raw) (Notice, error) {
	v, err := raw.LookupErr(OutboxField)
	if err != nil {
		return Notice{}, errors.New("no notice")
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return Notice{}, fmt.Errorf("%s is a %s, want a document {kind, at}", OutboxField, v.Type)
	}
	var n Notice
	n.Kind = str(bson.Raw(doc), "kind")
	if !slices.Contains(Kinds, n.Kind) {
		return Notice{}, fmt.Errorf("%s.kind must be one of %s", OutboxField, strings.Join(Kinds, ", "))
	}
	n.At = date(bson.Raw(doc), "at")
	if n.At.IsZero() {
		return Notice{}, fmt.Errorf("%s.at must be a date", OutboxField)
	}
	if nv, err := doc.LookupErr("note"); err == nil {
		n.Note, _ = nv.StringValueOK()
	}
	n.TraceParent, n.TraceState = str(bson.Raw(doc), "traceparent"), str(bson.Raw(doc), "tracestate")
	return n, nil
}

// str is the string field key of raw ("" when absent or not a string).
func str(raw bson.Raw, key string) string {
	v, err := raw.LookupErr(key)
	if err != nil {
		return ""
	}
	s, _ := v.StringValueOK()
	return s
}

// date is the date field key of raw (zero when absent or not a date).
func date(raw bson.Raw, key string) time.Time {
	v, err := raw.LookupErr(key)
	if err != nil {
		return time.Time{}
	}
	ms, ok := v.DateTimeOK()
	if !ok {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Payload is the JSON body a sink receives.
type Payload struct {
	NotificationID string    `json:"notification_id"`
	Kind           string    `json:"kind"`
	JobID          string    `json:"job_id"`
	At             time.Time `json:"at"`
	// RunID is the run record's id (failed, abandoned, missed notices), or
	// the last failed run a pause document names.
	RunID       string    `json:"run_id,omitempty"`
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	// LastScheduledAt and Count describe a missed range.
	LastScheduledAt time.Time `json:"last_scheduled_at,omitzero"`
	Count           int64     `json:"count,omitempty"`
	Status          string    `json:"status,omitempty"`
	Error           string    `json:"error,omitempty"`
	Reason          string    `json:"reason,omitempty"`
	Instance        string    `json:"instance,omitempty"`
	Note            string    `json:"note,omitempty"`
	Sink            string    `json:"sink"`
}

// plan returns the notifications of the notice of one outbox document and
// what becomes of the notice (for a bad notice: removed with its error,
// after logging it with the document's _id).
func (r *Relay) plan(src Source, raw bson.Raw) ([]any, Clear, error) {
	id, idv := idString(raw), raw.Lookup("_id")
	n, err := noticeOf(raw)
	if err != nil {
		r.o.Logger.Error("bad notice: not sent", "collection", src.Name(), "_id", id, "error", err)
		return nil, Clear{ID: idv, Bad: err.Error()}, nil
	}
	clear := Clear{ID: idv, Notice: n}
	jobID := str(raw, "job_id")
	if jobID == "" && n.Kind == KindPaused {
		jobID = id // a pause document keyed by the job
	}
	route := r.o.Route(jobID)
	if !route.Sends(n.Kind) {
		return nil, clear, nil
	}
	now := r.o.Now()
	if now.Sub(n.At) > r.o.Settings.MaxAge {
		r.o.Logger.Info("notice older than notify.max_age: not sent", "collection", src.Name(), "_id", id,
			"job_id", jobID, "kind", n.Kind, "at", n.At, "max_age", r.o.Settings.MaxAge)
		return nil, clear, nil
	}
	var docs []any
	for _, w := range route.Webhooks {
		nid := NotificationID(src.Name(), id, n.Kind, n.At, w.Name)
		p := Payload{NotificationID: nid, Kind: n.Kind, JobID: jobID, At: n.At, Note: n.Note, Sink: w.Name,
			ScheduledAt: date(raw, "scheduled_at"), LastScheduledAt: date(raw, "last_scheduled_at"),
			Status: str(raw, "status"), Error: str(raw, "error"), Reason: str(raw, "reason"), Instance: str(raw, "instance")}
		p.RunID = id
		if n.Kind == KindPaused {
			p.RunID = str(raw, "run_id") // the run whose failure paused the job, if named
		}
		if c, err := raw.LookupErr("count"); err == nil {
			p.Count, _ = c.AsInt64OK()
		}
		body, err := json.Marshal(p)
		if err != nil {
			return nil, Clear{}, fmt.Errorf("encode notification %s: %w", nid, err)
		}
		docs = append(docs, Doc{ID: nid, Kind: n.Kind, JobID: jobID, Sink: w.Name, Source: src.Name(), SourceID: id,
			At: n.At, Payload: string(body), Status: StatusPending, NextAttemptAt: now, CreatedAt: now,
			TraceParent: n.TraceParent, TraceState: n.TraceState})
	}
	r.o.Logger.Debug("notice moved", "collection", src.Name(), "_id", id, "job_id", jobID, "kind", n.Kind, "sinks", len(docs))
	return docs, clear, nil
}

// onlyDuplicates reports whether every write error of a bulk insert is a
// duplicate key (the notifications were written already).
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// claimed is a notification as claimed: the fields a delivery needs.
type claimed struct {
	id       string
	idv      bson.RawValue
	jobID    string
	sink     string
	payload  string
	attempts int32
	// trace is the notice's trace context.
	trace tracecontext.Carrier
}

// claim takes one due notification (oldest due first), hiding it for the
// lease and counting the attempt; ok false when none is due.
func (r *Relay) claim(ctx context.Context) (c claimed, ok bool, err error) {
	now := r.o.Now()
	res := r.o.Notifications.FindOneAndUpdate(ctx,
		bson.D{{Key: "status", Value: StatusPending}, {Key: "next_attempt_at", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "next_attempt_at", Value: now.Add(r.o.Lease)}, {Key: "holder", Value: r.o.Instance},
			{Key: "last_attempt_at", Value: now}}},
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}},
		options.FindOneAndUpdate().SetSort(bson.D{{Key: "next_attempt_at", Value: 1}}).SetReturnDocument(options.After))
	raw, err := res.Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("claim a notification in %s: %w", r.o.Notifications.Name(), err)
	}
	c = claimed{id: idString(raw), idv: raw.Lookup("_id"), jobID: str(raw, "job_id"), sink: str(raw, "sink"), payload: str(raw, "payload"),
		trace: tracecontext.Carrier{TraceParent: str(raw, "traceparent"), TraceState: str(raw, "tracestate")}}
	if v, err := raw.LookupErr("attempts"); err == nil {
		n, _ := v.AsInt64OK()
		c.attempts = int32(n)
	}
	return c, true, nil
}

// deliver sends the claimed notification c and records the outcome.
func (r *Relay) deliver(ctx context.Context, c claimed) error {
	log := r.o.Logger.With("notification_id", c.id, "job_id", c.jobID, "sink", c.sink, "attempt", c.attempts)
	var sendErr error
	var w Webhook
	var found bool
	switch {
	case c.sink == "" || c.payload == "" || c.jobID == "":
		sendErr = errors.New("bad notification: job_id, sink and payload must be non-empty strings")
	default:
		if w, found = r.o.Route(c.jobID).Webhook(c.sink); !found {
			sendErr = fmt.Errorf("sink %q is not configured for job %s", c.sink, c.jobID)
		}
	}
	permanent := sendErr != nil
	span := r.startDelivery(ctx, c)
	defer func() { endDelivery(span, sendErr) }()
	if sendErr == nil {
		// A delivery under way is finished (within Timeout) even when
		// the relay is stopping: one cut off after the sink took it
		// would be sent again.
		sendErr = r.send(context.WithoutCancel(ctx), w, c)
	}
	now := r.o.Now()
	filter := bson.D{{Key: "_id", Value: c.idv}, {Key: "holder", Value: r.o.Instance}, {Key: "attempts", Value: c.attempts},
		{Key: "status", Value: StatusPending}}
	var set bson.D
	switch {
	case sendErr == nil:
		set = bson.D{{Key: "status", Value: StatusDelivered}, {Key: "delivered_at", Value: now},
			{Key: "expire_at", Value: now.Add(r.o.Retention)}}
	case permanent || int(c.attempts) >= r.o.Settings.MaxAttempts:
		set = bson.D{{Key: "status", Value: StatusFailed}, {Key: "last_error", Value: sendErr.Error()},
			{Key: "expire_at", Value: now.Add(r.o.Retention)}}
	default:
		next := now.Add(r.backoff(int(c.attempts)))
		set = bson.D{{Key: "next_attempt_at", Value: next}, {Key: "last_error", Value: sendErr.Error()}}
		r.soon(next)
	}
	// The outcome is written even when ctx ended meanwhile (a delivery
	// that happened is recorded, or it would be sent again).
	// A failed write is tried again for up to Timeout: a delivery left
	// unrecorded is sent again once its lease passes.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.Settings.Timeout)
	defer cancel()
	var res *mongo.UpdateResult
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		res, err = r.o.Notifications.UpdateOne(wctx, filter, bson.D{{Key: "$set", Value: set}})
		if err == nil || wctx.Err() != nil {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-wctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if err != nil {
		return fmt.Errorf("record the delivery of %s in %s: %w", c.id, r.o.Notifications.Name(), err)
	}
	if res.MatchedCount == 0 {
		log.Warn("notification claimed again meanwhile: its lease passed during the delivery")
	}
	switch {
	case sendErr == nil:
		log.Info("notification delivered")
		if r.o.Hooks.Delivered != nil {
			r.o.Hooks.Delivered(c.sink)
		}
	default:
		gaveUp := permanent || int(c.attempts) >= r.o.Settings.MaxAttempts
		if gaveUp {
			log.Error("notification not delivered: given up", "error", sendErr)
		} else {
			log.Warn("notification delivery failed; will retry", "error", sendErr)
		}
		if r.o.Hooks.Failed != nil {
			r.o.Hooks.Failed(c.sink, gaveUp)
		}
	}
	return nil
}

// backoff is the wait after the attempts-th failure: Backoff doubled per
// further failure, at most MaxBackoff.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.o.Settings.Backoff
	for i := 1; i < attempts && d < r.o.Settings.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.o.Settings.MaxBackoff)
}

// send makes one request to w; a 2xx answer is success.
func (r *Relay) send(ctx context.Context, w Webhook, c claimed) error {
	u, headers, err := w.Expand(r.o.LookupEnv)
	if err != nil {
		return err
	}
	method := strings.ToUpper(w.Method)
	if method == "" {
		method = http.MethodPost
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Settings.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader([]byte(c.payload)))
	if err != nil {
		return fmt.Errorf("webhook %s: %w", w.Name, err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, c.id)
	resp, err := r.o.Client.Do(req)
	if err != nil {
		// The URL is left out of the error: it may hold a secret from
		// the environment, and the error is stored in last_error.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook %s: %s %s: %w", w.Name, method, redact(u), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s: HTTP %d %s", w.Name, resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	return nil
}

// redact is the scheme and host of u, for errors: webhook paths and
// queries often hold tokens.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	return p.Scheme + "://" + p.Host
}
