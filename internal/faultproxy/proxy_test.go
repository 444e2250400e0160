package faultproxy

//lint:file-ignore SA1019 the tests send the OP_QUERY handshake the proxy must answer.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	// Not t.Context(): it is canceled before Cleanup functions run, and
	// clients still need the proxy to disconnect and drop their data.
	p, err := New(context.Background(), upstream)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newClient connects the real driver through p with short timeouts.
func newClient(t *testing.T, p *Proxy, extra ...*options.ClientOptions) *mongo.Client {
	t.Helper()
	opts := options.Client().
		ApplyURI(p.URI("mongodb://db.invalid:27017/test")).
		SetHeartbeatInterval(500 * time.Millisecond).
		SetServerSelectionTimeout(5 * time.Second).
		SetConnectTimeout(2 * time.Second)
	c, err := mongo.Connect(append([]*options.ClientOptions{opts}, extra...)...)
	if err != nil {
		t.Fatalf("mongo.Connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

func ping(ctx context.Context, c *mongo.Client) error {
	return c.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
}

// eventually retries f until it returns nil or d elapses.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestNewListensOnLoopback(t *testing.T) {
	p := newProxy(t, "127.0.0.1:1")
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr() = %q, want 127.0.0.1:<port>", p.Addr())
	}
	if _, err := New(t.Context(), "no-port"); err == nil {
		t.Fatal("New accepted an upstream without a port")
	}
}

func TestPingPassesThrough(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)

	if err := ping(ctxTimeout(t, 5*time.Second), c); err != nil {
		t.Fatalf("ping through proxy: %v", err)
	}
	st := p.Stats()
	if st.Commands["ping"] != 1 || fake.count("ping") != 1 {
		t.Errorf("ping counted %d by proxy, %d by upstream; want 1 and 1", st.Commands["ping"], fake.count("ping"))
	}
	// The driver's first handshake is a legacy OP_QUERY isMaster; later
	// monitoring uses OP_MSG hello. Both are decoded.
	if st.Commands["isMaster"] == 0 {
		t.Errorf("OP_QUERY isMaster handshake not decoded: %v", st.Commands)
	}
	if st.Connections == 0 || st.Active == 0 || st.Opaque != 0 {
		t.Errorf("stats = %+v, want connections > 0, active > 0, opaque == 0", st)
	}
}

func TestFailNextSurfacesCommandError(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}

	p.FailNext(CommandName("ping"), ErrorReply{
		Code:     286,
		CodeName: "ChangeStreamHistoryLost",
		Errmsg:   "injected history lost",
		Labels:   []string{"NonResumableChangeStreamError", "Other"},
	})
	err := ping(ctx, c)
	var ce mongo.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("ping error = %T %v, want mongo.CommandError", err, err)
	}
	if ce.Code != 286 || ce.Name != "ChangeStreamHistoryLost" || ce.Message != "injected history lost" {
		t.Errorf("CommandError = %+v", ce)
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(286) ||
		!se.HasErrorLabel("NonResumableChangeStreamError") || !se.HasErrorLabel("Other") {
		t.Errorf("ServerError checks failed for %v (labels %v)", err, ce.Labels)
	}
	if mongo.IsNetworkError(err) {
		t.Errorf("injected error reported as network error: %v", err)
	}

	// One-shot: the next ping goes through, and the failed one never
	// reached upstream.
	if err := ping(ctx, c); err != nil {
		t.Fatalf("ping after one-shot fault: %v", err)
	}
	if got := fake.count("ping"); got != 2 {
		t.Errorf("upstream saw %d pings, want 2 (failed one must not be forwarded)", got)
	}
	st := p.Stats()
	if st.Injected["ping"] != 1 || st.Commands["ping"] != 3 {
		t.Errorf("stats: injected %v, commands %v", st.Injected, st.Commands)
	}
}

func TestFailTimesAlwaysAndClear(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 10*time.Second)

	codeOf := func(err error) int32 {
		var ce mongo.CommandError
		if errors.As(err, &ce) {
			return ce.Code
		}
		return 0
	}

	p.FailTimes(2, CommandName("ping"), ErrorReply{Code: 2, CodeName: "BadValue"})
	p.FailNext(CommandName("ping"), ErrorReply{Code: 9, CodeName: "FailedToParse"})
	// Rules are tried in order: two BadValue, then one FailedToParse.
	for i, want := range []int32{2, 2, 9, 0} {
		if got := codeOf(ping(ctx, c)); got != want {
			t.Fatalf("ping #%d: code %d, want %d", i, got, want)
		}
	}

	p.FailAlways(All(CommandName("ping"), Database("admin")), ErrorReply{Code: 11601, CodeName: "Interrupted"})
	for i := range 3 {
		if got := codeOf(ping(ctx, c)); got != 11601 {
			t.Fatalf("FailAlways ping #%d: code %d", i, got)
		}
	}
	p.ClearFailures()
	if err := ping(ctx, c); err != nil {
		t.Fatalf("ping after ClearFailures: %v", err)
	}
	if got := p.Stats().Injected["ping"]; got != 6 {
		t.Errorf("injected pings = %d, want 6", got)
	}
}

// TestInjectedReplyWireShape checks the exact bytes of an injected reply,
// for OP_MSG and for OP_QUERY, and that a moreToCome request is swallowed.
func TestInjectedReplyWireShape(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)

	p.FailNext(CommandName("ping"), ErrorReply{Code: 91, CodeName: "ShutdownInProgress", Errmsg: "bye",
		Labels: []string{"RetryableWriteError"}})
	if _, err := conn.Write(opMsg(t, 1001, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})); err != nil {
		t.Fatal(err)
	}
	reply, err := readMessage(r)
	if err != nil {
		t.Fatal(err)
	}
	length, _, respTo, opcode, rem, ok := wiremessage.ReadHeader(reply)
	if !ok || int(length) != len(reply) || respTo != 1001 || opcode != wiremessage.OpMsg {
		t.Fatalf("header: len %d/%d responseTo %d opcode %v", length, len(reply), respTo, opcode)
	}
	flags, rem, _ := wiremessage.ReadMsgFlags(rem)
	stype, rem, _ := wiremessage.ReadMsgSectionType(rem)
	body, rem, ok := wiremessage.ReadMsgSectionSingleDocument(rem)
	if flags != 0 || stype != wiremessage.SingleDocument || !ok || len(rem) != 0 {
		t.Fatalf("OP_MSG layout: flags %v section %v ok %v trailing %d", flags, stype, ok, len(rem))
	}
	want := mustMarshal(t, bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: "bye"},
		{Key: "code", Value: int32(91)},
		{Key: "codeName", Value: "ShutdownInProgress"},
		{Key: "errorLabels", Value: bson.A{"RetryableWriteError"}},
	})
	if !slices.Equal(body, want) {
		t.Fatalf("body = %v\nwant   %v", body, bsoncore.Document(want))
	}
	if fake.count("ping") != 0 {
		t.Fatal("failed ping was forwarded upstream")
	}

	// No labels: errorLabels must be absent.
	if got := (ErrorReply{Code: 1, CodeName: "InternalError", Errmsg: "x"}).errorBody(); slices.Contains(keys(t, got), "errorLabels") {
		t.Errorf("errorLabels present with no labels: %v", got)
	}

	// A moreToCome request expects no reply; a matching fault swallows it.
	p.FailNext(CommandName("insert"), ErrorReply{Code: 2})
	if _, err := conn.Write(opMsg(t, 1002, wiremessage.MoreToCome, bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "test"}})); err != nil {
		t.Fatal(err)
	}
	// The next reply on the connection must answer the forwarded ping.
	if _, err := conn.Write(opMsg(t, 1003, 0, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})); err != nil {
		t.Fatal(err)
	}
	reply, err = readMessage(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, respTo, _, _, _ := wiremessage.ReadHeader(reply); respTo != 1003 {
		t.Fatalf("reply responseTo %d, want 1003 (the swallowed request must not be answered)", respTo)
	}
	if fake.count("insert") != 0 || p.Stats().Injected["insert"] != 1 {
		t.Errorf("moreToCome insert: upstream saw %d, injected %d", fake.count("insert"), p.Stats().Injected["insert"])
	}

	// OP_QUERY commands are answered with an OP_REPLY carrying the same body.
	p.FailNext(CommandName("isMaster"), ErrorReply{Code: 13, CodeName: "Unauthorized", Errmsg: "no"})
	if _, err := conn.Write(opQuery(t, 1004, "admin.$cmd", bson.D{{Key: "isMaster", Value: 1}})); err != nil {
		t.Fatal(err)
	}
	reply, err = readMessage(r)
	if err != nil {
		t.Fatal(err)
	}
	_, _, respTo, opcode, rem, _ = wiremessage.ReadHeader(reply)
	if respTo != 1004 || opcode != wiremessage.OpReply {
		t.Fatalf("OP_QUERY reply: responseTo %d opcode %v", respTo, opcode)
	}
	rflags, rem, _ := wiremessage.ReadReplyFlags(rem)
	cursorID, rem, _ := wiremessage.ReadReplyCursorID(rem)
	_, rem, _ = wiremessage.ReadReplyStartingFrom(rem)
	n, rem, _ := wiremessage.ReadReplyNumberReturned(rem)
	docs, _, ok := wiremessage.ReadReplyDocuments(rem)
	wantQ := ErrorReply{Code: 13, CodeName: "Unauthorized", Errmsg: "no"}.errorBody()
	if rflags != 0 || cursorID != 0 || n != 1 || !ok || len(docs) != 1 || !slices.Equal(docs[0], wantQ) {
		t.Fatalf("OP_REPLY: flags %v cursor %d n %d docs %v", rflags, cursorID, n, docs)
	}
}

func keys(t *testing.T, d bsoncore.Document) []string {
	els, err := d.Elements()
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, e := range els {
		ks = append(ks, e.Key())
	}
	return ks
}

func opMsg(t *testing.T, reqID int32, flags wiremessage.MsgFlag, cmd bson.D) []byte {
	idx, b := wiremessage.AppendHeaderStart(nil, reqID, 0, wiremessage.OpMsg)
	b = wiremessage.AppendMsgFlags(b, flags)
	b = wiremessage.AppendMsgSectionType(b, wiremessage.SingleDocument)
	b = append(b, mustMarshal(t, cmd)...)
	return bsoncore.UpdateLength(b, idx, int32(len(b[idx:])))
}

func opQuery(t *testing.T, reqID int32, ns string, cmd bson.D) []byte {
	idx, b := wiremessage.AppendHeaderStart(nil, reqID, 0, wiremessage.OpQuery)
	b = wiremessage.AppendQueryFlags(b, 0)
	b = wiremessage.AppendQueryFullCollectionName(b, ns)
	b = wiremessage.AppendQueryNumberToSkip(b, 0)
	b = wiremessage.AppendQueryNumberToReturn(b, -1)
	b = append(b, mustMarshal(t, cmd)...)
	return bsoncore.UpdateLength(b, idx, int32(len(b[idx:])))
}

func TestOpaqueMessagesAreForwarded(t *testing.T) {
	// An upstream that echoes one raw message back proves unknown opcodes
	// (here OP_COMPRESSED) are forwarded byte for byte, in both directions.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		msg, err := readMessage(c)
		if err != nil {
			return
		}
		_, _ = c.Write(msg)
		_, _ = c.Read(make([]byte, 1)) // hold open until the client hangs up
	}()
	p := newProxy(t, ln.Addr().String())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))

	msg := wiremessage.AppendHeader(nil, 16+9+5, 7, 0, wiremessage.OpCompressed)
	msg = wiremessage.AppendCompressedOriginalOpCode(msg, wiremessage.OpMsg)
	msg = wiremessage.AppendCompressedUncompressedSize(msg, 100)
	msg = wiremessage.AppendCompressedCompressorID(msg, wiremessage.CompressorSnappy)
	msg = append(msg, "abcde"...)
	p.FailAlways(AnyCommand, ErrorReply{Code: 1})
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	got, err := readMessage(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, msg) {
		t.Fatalf("echo = %x, want %x", got, msg)
	}
	if st := p.Stats(); st.Opaque != 1 || len(st.Commands) != 0 || len(st.Injected) != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestCutAllFailsInFlightAndRecovers(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}

	errc := make(chan error, 1)
	go func() {
		errc <- c.Database("admin").RunCommand(ctx, bson.D{{Key: "slow", Value: 1}}).Err()
	}()
	select {
	case <-fake.slowArrived:
	case <-ctx.Done():
		t.Fatal("slow command never reached upstream")
	}
	if n := p.CutAll(); n == 0 {
		t.Fatal("CutAll cut no connections")
	}
	select {
	case err := <-errc:
		if err == nil || !mongo.IsNetworkError(err) {
			t.Fatalf("in-flight command error = %v, want a network error", err)
		}
	case <-ctx.Done():
		t.Fatal("in-flight command did not fail after CutAll")
	}
	if st := p.Stats(); st.Cuts == 0 {
		t.Errorf("stats.Cuts = 0 after CutAll")
	}

	eventually(t, 10*time.Second, "ping after CutAll", func() error { return ping(ctx, c) })
	if p.Stats().Active == 0 {
		t.Error("no active connections after recovery")
	}
}

func TestCutNext(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}

	// RunCommand is never retried: the cut surfaces as a network error.
	p.CutNext(CommandName("ping"))
	if err := ping(ctx, c); err == nil || !mongo.IsNetworkError(err) {
		t.Fatalf("ping after CutNext: %v, want network error", err)
	}
	if fake.count("ping") != 1 {
		t.Errorf("cut ping reached upstream")
	}

	// find is a retryable read: the driver retries once after the cut, on a
	// new connection, and succeeds.
	p.CutNext(CommandName("find"))
	var docs []bson.M
	cur, err := c.Database("test").Collection("items").Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("find was not retried after the cut: %v", err)
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Errorf("find returned %v, want two documents", docs)
	}
	if st := p.Stats(); st.Cuts != 2 || st.Commands["find"] != 2 || fake.count("find") != 1 {
		t.Errorf("stats = %+v, upstream finds %d", st, fake.count("find"))
	}
}

// CutAfterNext forwards the command (it takes effect upstream) and cuts
// the connection instead of delivering the reply.
func TestCutAfterNext(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}
	p.CutAfterNext(CommandName("ping"))
	if err := ping(ctx, c); err == nil || !mongo.IsNetworkError(err) {
		t.Fatalf("ping after CutAfterNext: %v, want network error", err)
	}
	if fake.count("ping") != 2 {
		t.Errorf("upstream saw %d pings, want the cut one forwarded too", fake.count("ping"))
	}
	if err := ping(ctx, c); err != nil {
		t.Fatalf("ping after the cut: %v", err)
	}
	if st := p.Stats(); st.Cuts != 1 {
		t.Errorf("cuts %d, want 1", st.Cuts)
	}
}

func TestHoldNext(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}
	h := p.HoldNext(CommandName("ping"))
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ping(pctx, c) }()
	select {
	case <-h.Held():
	case <-ctx.Done():
		t.Fatal("the ping was never held")
	}
	cancel() // the client gives up on it
	if err := <-done; err == nil {
		t.Fatal("the held ping succeeded")
	}
	if n := fake.count("ping"); n != 1 {
		t.Fatalf("upstream saw %d pings while one was held, want the warm-up only", n)
	}
	h.Release()
	select {
	case <-h.Answered():
	case <-ctx.Done():
		t.Fatal("the released ping was never answered")
	}
	if n := fake.count("ping"); n != 2 {
		t.Errorf("upstream saw %d pings, want the abandoned one forwarded on release", n)
	}
	if err := ping(ctx, c); err != nil {
		t.Fatalf("ping after the hold: %v", err)
	}
}

func TestRefuseFor(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("warm-up ping: %v", err)
	}

	const period = 1500 * time.Millisecond
	start := time.Now()
	p.Outage(period)

	// Existing client: its connections are gone and cannot be re-opened.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := ping(short, c)
	cancel()
	if err == nil {
		t.Fatal("ping succeeded during outage")
	}
	// Fresh client: its connection handshake is refused.
	fresh := newClient(t, p, options.Client().SetServerSelectionTimeout(300*time.Millisecond))
	if err := ping(ctx, fresh); err == nil {
		t.Fatal("fresh client ping succeeded while refusing")
	}
	if time.Since(start) < period {
		if st := p.Stats(); st.Refused == 0 {
			t.Errorf("no connection counted as refused: %+v", st)
		}
	}

	eventually(t, 15*time.Second, "ping after refuse period", func() error { return ping(ctx, c) })
	eventually(t, 15*time.Second, "fresh ping after refuse period", func() error { return ping(ctx, fresh) })
	if time.Since(start) < period {
		t.Fatalf("recovered after %v, before the %v refuse period ended", time.Since(start), period)
	}

	// RefuseFor(0) ends a refuse period early.
	p.RefuseFor(time.Hour)
	p.RefuseFor(0)
	p.CutAll()
	eventually(t, 10*time.Second, "ping after RefuseFor(0)", func() error { return ping(ctx, c) })
}

// TestStreamingHeartbeatsPassThrough makes the driver's monitor use
// streaming hello (exhaustAllowed requests, moreToCome replies) through the
// proxy and checks that unsolicited server messages are forwarded and that
// injected replies still reach the right operation meanwhile.
func TestStreamingHeartbeatsPassThrough(t *testing.T) {
	fake := startFakeServer(t, true)
	p := newProxy(t, fake.addr())
	var awaited atomic.Int64
	monitor := &event.ServerMonitor{
		ServerHeartbeatSucceeded: func(e *event.ServerHeartbeatSucceededEvent) {
			if e.Awaited {
				awaited.Add(1)
			}
		},
	}
	c := newClient(t, p, options.Client().
		SetServerMonitoringMode(options.ServerMonitoringModeStream).
		SetServerMonitor(monitor))
	ctx := ctxTimeout(t, 20*time.Second)
	if err := ping(ctx, c); err != nil {
		t.Fatalf("ping: %v", err)
	}
	eventually(t, 10*time.Second, "awaited heartbeats", func() error {
		if n := awaited.Load(); n < 5 {
			return errors.New("fewer than 5 awaited heartbeats")
		}
		return nil
	})
	if fake.streamed.Load() < 5 {
		t.Fatalf("fake server streamed %d replies", fake.streamed.Load())
	}
	hellosBefore := p.Stats().Commands["hello"]

	for range 5 {
		p.FailNext(CommandName("ping"), ErrorReply{Code: 2, CodeName: "BadValue"})
		var se mongo.ServerError
		if err := ping(ctx, c); !errors.As(err, &se) || !se.HasErrorCode(2) {
			t.Fatalf("injected ping error = %v", err)
		}
		if err := ping(ctx, c); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	// Streamed replies go on arriving, without further hello requests.
	streamedBefore := awaited.Load()
	eventually(t, 10*time.Second, "awaited heartbeats after the injected errors", func() error {
		if n := awaited.Load() - streamedBefore; n < 3 {
			return fmt.Errorf("%d awaited heartbeats since the injected errors, want 3", n)
		}
		return nil
	})
	if after := p.Stats().Commands["hello"]; after-hellosBefore > 20 {
		t.Errorf("%d hello requests while streaming; replies should be unsolicited", after-hellosBefore)
	}
}

func TestChangeStreamFaults(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	c := newClient(t, p)
	ctx := ctxTimeout(t, 20*time.Second)
	coll := c.Database("test").Collection("items")

	historyLost := ErrorReply{
		Code:     286,
		CodeName: "ChangeStreamHistoryLost",
		Errmsg:   "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
		Labels:   []string{"NonResumableChangeStreamError"},
	}

	// Failing the opening aggregate surfaces from Watch.
	p.FailNext(IsChangeStreamAggregate, historyLost)
	_, err := coll.Watch(ctx, mongo.Pipeline{})
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(286) {
		t.Fatalf("Watch error = %v, want code 286", err)
	}

	cs, err := coll.Watch(ctx, mongo.Pipeline{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer cs.Close(context.Background())
	// The first TryNext consumes the (empty) first batch, the second
	// issues a getMore that passes through.
	for range 2 {
		if cs.TryNext(ctx) || cs.Err() != nil {
			t.Fatalf("TryNext: %v", cs.Err())
		}
	}
	if fake.count("getMore") != 1 {
		t.Fatalf("upstream getMores = %d, want 1", fake.count("getMore"))
	}

	// Only the change stream's getMore is failed, not a find cursor's.
	p.FailNext(p.ChangeStreamGetMore(), historyLost)
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.M
	if err := cur.All(ctx, &docs); err != nil || len(docs) != 2 {
		t.Fatalf("find cursor: %v %v (its getMore must not match)", docs, err)
	}

	if cs.TryNext(ctx) {
		t.Fatal("TryNext returned an event")
	}
	err = cs.Err()
	if !errors.As(err, &se) || !se.HasErrorCode(286) || !se.HasErrorLabel("NonResumableChangeStreamError") {
		t.Fatalf("cs.Err() = %v, want 286 with label", err)
	}
	st := p.Stats()
	if st.Injected["aggregate"] != 1 || st.Injected["getMore"] != 1 {
		t.Errorf("injected = %v", st.Injected)
	}
	if fake.count("getMore") != 2 || st.Commands["getMore"] != 3 { // injected one not forwarded
		t.Errorf("getMores: upstream %d (want 2), proxy %d (want 3)", fake.count("getMore"), st.Commands["getMore"])
	}
}

func TestCloseIsIdempotentAndContextCloses(t *testing.T) {
	fake := startFakeServer(t, false)
	ctx, cancel := context.WithCancel(t.Context())
	p, err := New(ctx, fake.addr())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancel()
	eventually(t, 5*time.Second, "listener closed after ctx cancel", func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			c.Close()
			return errors.New("still accepting")
		}
		return nil
	})
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("client connection still open after Close")
	} else {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Error("client connection not closed by Close")
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if st := p.Stats(); st.Active != 0 {
		t.Errorf("active connections after Close: %d", st.Active)
	}
}

func TestMatchers(t *testing.T) {
	doc := func(d bson.D) bsoncore.Document { return mustMarshal(t, d) }
	cs := doc(bson.D{
		{Key: "aggregate", Value: "items"},
		{Key: "pipeline", Value: bson.A{bson.D{{Key: "$changeStream", Value: bson.D{}}}, bson.D{{Key: "$match", Value: bson.D{}}}}},
		{Key: "$db", Value: "test"},
	})
	agg := doc(bson.D{
		{Key: "aggregate", Value: "items"},
		{Key: "pipeline", Value: bson.A{bson.D{{Key: "$match", Value: bson.D{}}}}},
		{Key: "$db", Value: "test"},
	})
	getMore := doc(bson.D{{Key: "getMore", Value: int64(5)}, {Key: "collection", Value: "items"}, {Key: "$db", Value: "test"}})
	empty := doc(bson.D{})

	cases := []struct {
		name string
		m    Matcher
		d    bsoncore.Document
		want bool
	}{
		{"cs aggregate", IsChangeStreamAggregate, cs, true},
		{"plain aggregate", IsChangeStreamAggregate, agg, false},
		{"getMore not cs", IsChangeStreamAggregate, getMore, false},
		{"empty", IsChangeStreamAggregate, empty, false},
		{"name", CommandName("find", "aggregate"), agg, true},
		{"name miss", CommandName("find"), agg, false},
		{"name empty doc", CommandName(""), empty, true},
		{"collection", Collection("items"), agg, true},
		{"collection getMore", Collection("items"), getMore, true},
		{"collection miss", Collection("other"), getMore, false},
		{"database", Database("test"), agg, true},
		{"database miss", Database("admin"), agg, false},
		{"all", All(CommandName("aggregate"), Not(IsChangeStreamAggregate)), agg, true},
		{"all miss", All(CommandName("aggregate"), Not(IsChangeStreamAggregate)), cs, false},
		{"anyOf", AnyOf(CommandName("find"), IsChangeStreamAggregate), cs, true},
		{"anyOf miss", AnyOf(), cs, false},
	}
	for _, tc := range cases {
		if got := tc.m(tc.d); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestURI(t *testing.T) {
	const addr = "127.0.0.1:4000"
	cases := []struct{ in, want string }{
		{"", "mongodb://127.0.0.1:4000/?directConnection=true"},
		{"mongodb://localhost:27017", "mongodb://127.0.0.1:4000/?directConnection=true"},
		{"mongodb://localhost:27017/", "mongodb://127.0.0.1:4000/?directConnection=true"},
		{"mongodb://u:p%40x@a:1,b:2,c:3/db?replicaSet=rs0&compressors=zstd&directConnection=false&w=majority",
			"mongodb://u:p%40x@127.0.0.1:4000/db?replicaSet=rs0&w=majority&directConnection=true"},
		{"mongodb+srv://cluster.example.com/?srvServiceName=x&retryWrites=true",
			"mongodb://127.0.0.1:4000/?retryWrites=true&directConnection=true"},
		{"mongodb://h?loadBalanced=true;appName=x", "mongodb://127.0.0.1:4000/?appName=x&directConnection=true"},
	}
	for _, tc := range cases {
		if got := rewriteURI(tc.in, addr); got != tc.want {
			t.Errorf("rewriteURI(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if err := options.Client().ApplyURI(rewriteURI(tc.in, addr)).Validate(); err != nil {
			t.Errorf("driver rejects %q: %v", rewriteURI(tc.in, addr), err)
		}
	}
}

func TestMalformedLengthClosesConnection(t *testing.T) {
	fake := startFakeServer(t, false)
	p := newProxy(t, fake.addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b [16]byte
	binary.LittleEndian.PutUint32(b[:], 3) // shorter than a header
	if _, err := conn.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after a malformed message")
	}
}

func TestUpstream(t *testing.T) {
	for in, want := range map[string]string{
		"mongodb://127.0.0.1:41234/":                         "127.0.0.1:41234",
		"mongodb://u:p@db1:27018,db2/?replicaSet=rs0":        "db1:27018",
		"mongodb://localhost/cronswap":                       "localhost:27017",
		"mongodb://127.0.0.1:27017/?directConnection=true":   "127.0.0.1:27017",
		"mongodb://user:p%40ss@127.0.0.1:1?authSource=admin": "127.0.0.1:1",
	} {
		if got, ok := Upstream(in); !ok || got != want {
			t.Errorf("Upstream(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
	if got, ok := Upstream("mongodb+srv://cluster.example.com/"); ok {
		t.Errorf("Upstream of an SRV string = %q, want none", got)
	}
}
