package faultproxy

//lint:file-ignore SA1019 the driver's first handshake comes as OP_QUERY, which the proxy must read and answer.

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

const (
	headerLen = 16
	// maxMessageLen bounds a single wire message. mongod's
	// maxMessageSizeBytes is 48,000,000; leave some headroom.
	maxMessageLen = 64 << 20
)

// readMessage reads one complete wire message (header included) from r.
func readMessage(r io.Reader) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := int32(binary.LittleEndian.Uint32(lenBuf[:]))
	if n < headerLen || n > maxMessageLen {
		return nil, fmt.Errorf("faultproxy: invalid wire message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, lenBuf[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// request is what the proxy learns from one client-to-server message.
type request struct {
	requestID int32
	opcode    wiremessage.OpCode
	// cmd is the command document, or nil if the message is not an
	// inspectable command (unknown opcode, OP_COMPRESSED, malformed).
	cmd bsoncore.Document
	// name is the command name (first key of cmd), "" if cmd is nil.
	name string
	// moreToCome is set for OP_MSG requests that expect no reply.
	moreToCome bool
}

// parseRequest decodes what it can of a client message. It never fails:
// anything it does not understand is left opaque (cmd == nil).
func parseRequest(msg []byte) request {
	_, reqID, _, opcode, rem, ok := wiremessage.ReadHeader(msg)
	if !ok {
		return request{}
	}
	req := request{requestID: reqID, opcode: opcode}
	switch opcode {
	case wiremessage.OpMsg:
		req.cmd, req.moreToCome = parseOpMsgBody(rem)
	case wiremessage.OpQuery:
		req.cmd = parseOpQueryCommand(rem)
	}
	if req.cmd != nil {
		req.name = commandNameOf(req.cmd)
	}
	return req
}

// parseOpMsgBody returns the section-0 document of an OP_MSG (without the
// header) and whether the moreToCome flag is set.
func parseOpMsgBody(rem []byte) (bsoncore.Document, bool) {
	flags, rem, ok := wiremessage.ReadMsgFlags(rem)
	if !ok {
		return nil, false
	}
	moreToCome := flags&wiremessage.MoreToCome != 0
	if flags&wiremessage.ChecksumPresent != 0 {
		if len(rem) < 4 {
			return nil, moreToCome
		}
		rem = rem[:len(rem)-4]
	}
	var body bsoncore.Document
	for len(rem) > 0 {
		var stype wiremessage.SectionType
		stype, rem, ok = wiremessage.ReadMsgSectionType(rem)
		if !ok {
			return nil, moreToCome
		}
		switch stype {
		case wiremessage.SingleDocument:
			body, rem, ok = wiremessage.ReadMsgSectionSingleDocument(rem)
		case wiremessage.DocumentSequence:
			_, _, rem, ok = wiremessage.ReadMsgSectionRawDocumentSequence(rem)
		default:
			ok = false
		}
		if !ok {
			return nil, moreToCome
		}
	}
	if body == nil || body.Validate() != nil {
		return nil, moreToCome
	}
	return body, moreToCome
}

// parseOpQueryCommand returns the command of an OP_QUERY addressed to a
// "<db>.$cmd" namespace, unwrapping a {$query: {...}} envelope.
func parseOpQueryCommand(rem []byte) bsoncore.Document {
	_, rem, ok := wiremessage.ReadQueryFlags(rem)
	if !ok {
		return nil
	}
	ns, rem, ok := wiremessage.ReadQueryFullCollectionName(rem)
	if !ok || !strings.HasSuffix(ns, ".$cmd") {
		return nil
	}
	if _, rem, ok = wiremessage.ReadQueryNumberToSkip(rem); !ok {
		return nil
	}
	if _, rem, ok = wiremessage.ReadQueryNumberToReturn(rem); !ok {
		return nil
	}
	q, _, ok := wiremessage.ReadQueryQuery(rem)
	if !ok || q.Validate() != nil {
		return nil
	}
	if first, err := q.IndexErr(0); err == nil {
		if k := first.Key(); k == "$query" || k == "query" {
			if inner, ok := first.Value().DocumentOK(); ok {
				return inner
			}
		}
	}
	return q
}

// commandNameOf returns the first key of cmd, or "" if it has none.
func commandNameOf(cmd bsoncore.Document) string {
	e, err := cmd.IndexErr(0)
	if err != nil {
		return ""
	}
	k, err := e.KeyErr()
	if err != nil {
		return ""
	}
	return k
}

// errorBody renders e as the document mongod sends for a failed command.
func (e ErrorReply) errorBody() bsoncore.Document {
	msg := e.Errmsg
	if msg == "" {
		msg = "Failing command via faultproxy"
	}
	idx, b := bsoncore.AppendDocumentStart(nil)
	b = bsoncore.AppendDoubleElement(b, "ok", 0)
	b = bsoncore.AppendStringElement(b, "errmsg", msg)
	b = bsoncore.AppendInt32Element(b, "code", e.Code)
	b = bsoncore.AppendStringElement(b, "codeName", e.CodeName)
	if len(e.Labels) > 0 {
		aidx, ab := bsoncore.AppendArrayElementStart(b, "errorLabels")
		for i, l := range e.Labels {
			ab = bsoncore.AppendStringElement(ab, fmt.Sprint(i), l)
		}
		b, _ = bsoncore.AppendArrayEnd(ab, aidx)
	}
	b, _ = bsoncore.AppendDocumentEnd(b, idx)
	return b
}

// replyTo builds the reply to req carrying body, in the wire format that
// matches the request's opcode: OP_REPLY for OP_QUERY, OP_MSG otherwise.
func replyTo(req request, requestID int32, body bsoncore.Document) []byte {
	if req.opcode == wiremessage.OpQuery {
		idx, b := wiremessage.AppendHeaderStart(nil, requestID, req.requestID, wiremessage.OpReply)
		b = wiremessage.AppendReplyFlags(b, 0)
		b = wiremessage.AppendReplyCursorID(b, 0)
		b = wiremessage.AppendReplyStartingFrom(b, 0)
		b = wiremessage.AppendReplyNumberReturned(b, 1)
		b = append(b, body...)
		return bsoncore.UpdateLength(b, idx, int32(len(b[idx:])))
	}
	idx, b := wiremessage.AppendHeaderStart(nil, requestID, req.requestID, wiremessage.OpMsg)
	b = wiremessage.AppendMsgFlags(b, 0)
	b = wiremessage.AppendMsgSectionType(b, wiremessage.SingleDocument)
	b = append(b, body...)
	return bsoncore.UpdateLength(b, idx, int32(len(b[idx:])))
}

// replyCursorID extracts cursor.id from a server reply to a command
// (OP_MSG, or an uncompressed OP_REPLY).
func replyCursorID(msg []byte) (int64, bool) {
	_, _, _, opcode, rem, ok := wiremessage.ReadHeader(msg)
	if !ok {
		return 0, false
	}
	var body bsoncore.Document
	switch opcode {
	case wiremessage.OpMsg:
		body, _ = parseOpMsgBody(rem)
	case wiremessage.OpReply:
		var docs []bsoncore.Document
		for _, skip := range []int{4, 8, 4, 4} { // flags, cursorID, startingFrom, numberReturned
			if len(rem) < skip {
				return 0, false
			}
			rem = rem[skip:]
		}
		docs, _, ok = wiremessage.ReadReplyDocuments(rem)
		if ok && len(docs) == 1 {
			body = docs[0]
		}
	}
	if body == nil {
		return 0, false
	}
	id, err := body.LookupErr("cursor", "id")
	if err != nil {
		return 0, false
	}
	return id.AsInt64OK()
}
