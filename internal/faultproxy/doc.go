// Package faultproxy is a test-support TCP proxy that speaks just enough of
// MongoDB's wire protocol to inject faults between a client (the Go driver)
// and a MongoDB-compatible server.
//
// It is the stand-in for mongod's failCommand fail point, which the test
// servers used by this project do not implement. Where a test against a real
// replica set would run
//
//	db.adminCommand({configureFailPoint: "failCommand",
//	    mode: {times: 1},
//	    data: {failCommands: ["getMore"], errorCode: 286, errorLabels: [...]}})
//
// a test here points the client at a Proxy and calls
//
//	p.FailNext(faultproxy.CommandName("getMore"), faultproxy.ErrorReply{
//	    Code: 286, CodeName: "ChangeStreamHistoryLost", Labels: [...]})
//
// The injected reply has exactly the shape mongod uses for a failed command:
// an OP_MSG whose responseTo is the request's requestID and whose single body
// document is {ok: 0.0, errmsg, code, codeName, errorLabels}, errorLabels
// being present only when non-empty. The driver therefore surfaces it as a
// mongo.CommandError / mongo.ServerError like any server error. The failed
// command is never forwarded, so it has no effect upstream (as with
// failCommand). failCommand's closeConnection mode is CutNext, and
// network-level faults are CutAll, RefuseFor and Outage.
//
// # Real failure modes and their stand-ins
//
//	replica set step-down (connections closed)   p.CutAll()
//	network partition, server down for a while    p.Outage(d), or p.RefuseFor(d) for new connections only
//	resume point fell off the oplog               p.FailNext(faultproxy.IsChangeStreamAggregate, ErrorReply{Code: 286,
//	                                                  CodeName: "ChangeStreamHistoryLost", Labels: []string{"NonResumableChangeStreamError"}})
//	the same, discovered on a getMore             p.FailNext(p.ChangeStreamGetMore(), <the same reply>)
//	standalone mongod (no change streams)         p.FailAlways(faultproxy.IsChangeStreamAggregate, ErrorReply{Code: 40573,
//	                                                  CodeName: "Location40573", Errmsg: "The $changeStream stage is only supported on replica sets"})
//	failCommand with closeConnection: true        p.CutNext(m)
//	write applied, answer lost (cut on the way back) p.CutAfterNext(m)
//	command stuck on its way to a busy server      h := p.HoldNext(m); <-h.Held(); ...; h.Release(); <-h.Answered()
//
// # Usage
//
//	p, err := faultproxy.New(ctx, "127.0.0.1:27017")
//	if err != nil { ... }
//	defer p.Close()
//	client, err := mongo.Connect(options.Client().ApplyURI(p.URI("mongodb://127.0.0.1:27017/?replicaSet=rs0")))
//	...
//	p.FailNext(faultproxy.CommandName("ping"), faultproxy.ErrorReply{Code: 2, CodeName: "BadValue"})
//	p.FailNext(p.ChangeStreamGetMore(), faultproxy.ErrorReply{Code: 286, CodeName: "ChangeStreamHistoryLost"})
//	p.CutNext(faultproxy.IsChangeStreamAggregate) // like failCommand's closeConnection
//	p.CutAll()                    // sever every open connection now
//	p.RefuseFor(2 * time.Second)  // new connections are accepted and closed at once
//	fmt.Println(p.Stats().Commands["getMore"])
//
// # Scope and limitations
//
// The proxy listens on 127.0.0.1 only, on a port chosen by the kernel. The
// upstream may be any address but is normally a local test server.
//
// Each client connection gets its own upstream connection and two pumps.
// Server-to-client messages are forwarded independently of requests, so
// streamed replies (OP_MSG moreToCome, such as the awaitable hello heartbeats
// the driver's monitor requests with exhaustAllowed) pass through unchanged.
// Only client-to-server messages are intercepted. An injected reply never
// sets moreToCome, so a streaming exchange ends there, as it would on a real
// server error. A request that itself sets moreToCome (an unacknowledged
// write) expects no reply: if a fault matches it, the request is dropped.
// Injected replies and forwarded replies are written whole, under a
// per-connection lock, so they never interleave. The Go driver does not
// pipeline requests on one connection, so this keeps replies in order.
//
// OP_MSG and OP_QUERY commands (the driver's first, legacy "isMaster"
// handshake is an OP_QUERY) are decoded, counted and matched. A matched
// OP_QUERY command is answered with an OP_REPLY that holds the same error
// document. Every other opcode, OP_COMPRESSED included, is forwarded
// unchanged without being inspected. Because of this, the client must not
// enable wire compression: leave the compressors option unset (URI strips
// it). Otherwise every command after the handshake is opaque to the proxy,
// and matchers never fire.
//
// Clients must connect directly (directConnection=true, which URI sets).
// Otherwise the driver would discover a replica set's members from hello
// and connect to them directly, bypassing the proxy.
package faultproxy
