package faultproxy

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// Cursor IDs handed out by the fake server.
const (
	fakeFindCursorID   int64 = 77
	fakeChangeCursorID int64 = 42
)

// fakeServer is a minimal MongoDB wire-protocol server for tests. It
// answers the handshake (OP_QUERY isMaster and OP_MSG hello), ping,
// buildInfo, endSessions, killCursors, find/getMore on a two-document
// collection, change-stream aggregates and their getMores, and a "slow"
// command that blocks until the test ends or the "slow" gate is released.
// With streaming set, hello replies carry a topologyVersion so the driver's
// monitor switches to streaming (exhaustAllowed) heartbeats, which the
// server then answers with moreToCome replies every 50ms.
type fakeServer struct {
	t         testing.TB
	ln        net.Listener
	streaming bool
	processID bson.ObjectID
	reqID     atomic.Int32

	slowArrived chan struct{} // receives one value per "slow" command
	release     chan struct{} // closed to unblock "slow" commands
	releaseOnce sync.Once

	streamed atomic.Int64 // moreToCome hello replies sent

	mu       sync.Mutex
	commands map[string]int
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func startFakeServer(t testing.TB, streaming bool) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake server listen: %v", err)
	}
	s := &fakeServer{
		t:           t,
		ln:          ln,
		streaming:   streaming,
		processID:   bson.NewObjectID(),
		slowArrived: make(chan struct{}, 16),
		release:     make(chan struct{}),
		commands:    map[string]int{},
		conns:       map[net.Conn]struct{}{},
	}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

func (s *fakeServer) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commands[name]
}

func (s *fakeServer) releaseSlow() { s.releaseOnce.Do(func() { close(s.release) }) }

func (s *fakeServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.releaseSlow()
	s.wg.Wait()
}

func (s *fakeServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *fakeServer) serve(c net.Conn) {
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	r := bufio.NewReader(c)
	for {
		msg, err := readMessage(r)
		if err != nil {
			return
		}
		req := parseRequest(msg)
		if req.cmd == nil {
			s.t.Errorf("fake server: cannot decode %v message", req.opcode)
			return
		}
		s.mu.Lock()
		s.commands[req.name]++
		s.mu.Unlock()

		body := s.respond(req)
		if req.moreToCome {
			continue
		}
		if req.opcode == wiremessage.OpMsg && msgFlags(msg)&wiremessage.ExhaustAllowed != 0 &&
			isHello(req.name) && s.streaming {
			s.stream(c, req, body)
			return
		}
		if _, err := c.Write(replyTo(req, s.reqID.Add(1), body)); err != nil {
			return
		}
	}
}

// stream answers an awaitable hello with an endless series of moreToCome
// replies, as mongod does for exhaustAllowed requests.
func (s *fakeServer) stream(c net.Conn, req request, body bsoncore.Document) {
	for {
		msg := replyTo(req, s.reqID.Add(1), body)
		flags := binary.LittleEndian.Uint32(msg[16:])
		binary.LittleEndian.PutUint32(msg[16:], flags|uint32(wiremessage.MoreToCome))
		if _, err := c.Write(msg); err != nil {
			return
		}
		s.streamed.Add(1)
		select {
		case <-s.release:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func msgFlags(msg []byte) wiremessage.MsgFlag {
	if len(msg) < headerLen+4 {
		return 0
	}
	return wiremessage.MsgFlag(binary.LittleEndian.Uint32(msg[headerLen:]))
}

func isHello(name string) bool { return name == "hello" || name == "isMaster" || name == "ismaster" }

func (s *fakeServer) respond(req request) bsoncore.Document {
	ns := "test.items"
	if db, ok := req.cmd.Lookup("$db").StringValueOK(); ok {
		if coll, ok := req.cmd.Index(0).Value().StringValueOK(); ok {
			ns = db + "." + coll
		}
	}
	switch {
	case isHello(req.name):
		hello := bson.D{
			{Key: "isWritablePrimary", Value: true},
			{Key: "ismaster", Value: true},
			{Key: "helloOk", Value: true},
			{Key: "maxWireVersion", Value: int32(17)},
			{Key: "minWireVersion", Value: int32(0)},
			{Key: "maxBsonObjectSize", Value: int32(16777216)},
			{Key: "maxMessageSizeBytes", Value: int32(48000000)},
			{Key: "maxWriteBatchSize", Value: int32(100000)},
			{Key: "localTime", Value: bson.NewDateTimeFromTime(time.Now())},
			{Key: "logicalSessionTimeoutMinutes", Value: int32(30)},
			{Key: "connectionId", Value: int32(1)},
		}
		if s.streaming {
			hello = append(hello, bson.E{Key: "topologyVersion", Value: bson.D{
				{Key: "processId", Value: s.processID},
				{Key: "counter", Value: int64(0)},
			}})
		}
		return mustMarshal(s.t, append(hello, bson.E{Key: "ok", Value: 1.0}))
	case req.name == "find":
		return mustMarshal(s.t, bson.D{
			{Key: "cursor", Value: bson.D{
				{Key: "firstBatch", Value: bson.A{bson.D{{Key: "_id", Value: int32(1)}}}},
				{Key: "id", Value: fakeFindCursorID},
				{Key: "ns", Value: ns},
			}},
			{Key: "ok", Value: 1.0},
		})
	case req.name == "aggregate" && IsChangeStreamAggregate(req.cmd):
		return mustMarshal(s.t, bson.D{
			{Key: "cursor", Value: bson.D{
				{Key: "firstBatch", Value: bson.A{}},
				{Key: "postBatchResumeToken", Value: bson.D{{Key: "_data", Value: "8200000001"}}},
				{Key: "id", Value: fakeChangeCursorID},
				{Key: "ns", Value: ns},
			}},
			{Key: "ok", Value: 1.0},
		})
	case req.name == "getMore":
		id, _ := req.cmd.Lookup("getMore").AsInt64OK()
		coll, _ := req.cmd.Lookup("collection").StringValueOK()
		db, _ := req.cmd.Lookup("$db").StringValueOK()
		cursor := bson.D{{Key: "id", Value: id}, {Key: "ns", Value: db + "." + coll}}
		switch id {
		case fakeFindCursorID:
			cursor[0].Value = int64(0)
			cursor = append(cursor, bson.E{Key: "nextBatch", Value: bson.A{bson.D{{Key: "_id", Value: int32(2)}}}})
		case fakeChangeCursorID:
			cursor = append(cursor,
				bson.E{Key: "nextBatch", Value: bson.A{}},
				bson.E{Key: "postBatchResumeToken", Value: bson.D{{Key: "_data", Value: "8200000002"}}})
		default:
			return errorDoc(s.t, 43, "CursorNotFound", "cursor id not found")
		}
		return mustMarshal(s.t, bson.D{{Key: "cursor", Value: cursor}, {Key: "ok", Value: 1.0}})
	case req.name == "slow":
		s.slowArrived <- struct{}{}
		select {
		case <-s.release:
		case <-time.After(10 * time.Second):
		}
		return mustMarshal(s.t, bson.D{{Key: "ok", Value: 1.0}})
	case req.name == "buildInfo" || req.name == "buildinfo":
		return mustMarshal(s.t, bson.D{
			{Key: "version", Value: "7.0.0"},
			{Key: "versionArray", Value: bson.A{int32(7), int32(0), int32(0), int32(0)}},
			{Key: "ok", Value: 1.0},
		})
	case req.name == "ping", req.name == "endSessions", req.name == "killCursors", req.name == "insert":
		return mustMarshal(s.t, bson.D{{Key: "ok", Value: 1.0}})
	default:
		return errorDoc(s.t, 59, "CommandNotFound", "no such command: '"+req.name+"'")
	}
}

func errorDoc(t testing.TB, code int32, name, msg string) bsoncore.Document {
	return mustMarshal(t, bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: msg},
		{Key: "code", Value: code},
		{Key: "codeName", Value: name},
	})
}

func mustMarshal(t testing.TB, v any) bsoncore.Document {
	b, err := bson.Marshal(v)
	if err != nil {
		t.Errorf("marshal: %v", err)
		return nil
	}
	return b
}
