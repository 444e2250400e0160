package schedule

import (
	"encoding/binary"
	"strconv"
)

// appendRelaxedJSON appends to dst the relaxed extended JSON of the BSON
// document doc exactly as bson.MarshalExtJSON(doc, false, false) writes
// it, for the documents args usually are: strings, 32- and 64-bit
// integers, booleans, nulls, embedded documents and arrays, with keys and
// strings of printable ASCII other than '"' and '\'. ok is false for
// anything else (another type, a string that needs escaping), and the
// caller asks the driver. Turning args into JSON was half of decoding a
// schedule, most of it the driver's general encoder; a million schedules'
// args take about two seconds of CPU that way. doc must be valid BSON
// (DecodeFields validates it first).
func appendRelaxedJSON(dst []byte, doc []byte, array bool) ([]byte, bool) {
	if len(doc) < 5 {
		return dst, false
	}
	open, close := byte('{'), byte('}')
	if array {
		open, close = '[', ']'
	}
	dst = append(dst, open)
	rest := doc[4 : len(doc)-1]
	first := true
	for len(rest) > 0 {
		t := rest[0]
		rest = rest[1:]
		end := 0
		for end < len(rest) && rest[end] != 0 {
			end++
		}
		if end == len(rest) {
			return dst, false
		}
		key := rest[:end]
		rest = rest[end+1:]
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if !array {
			if !plain(key) {
				return dst, false
			}
			dst = append(dst, '"')
			dst = append(dst, key...)
			dst = append(dst, '"', ':')
		}
		var ok bool
		if dst, rest, ok = appendValue(dst, t, rest); !ok {
			return dst, false
		}
	}
	return append(dst, close), true
}

// appendValue appends the JSON of one value of type t at the start of
// src, and returns what follows it.
func appendValue(dst []byte, t byte, src []byte) ([]byte, []byte, bool) {
	switch t {
	case 0x02: // string
		if len(src) < 5 {
			return dst, nil, false
		}
		n := int(binary.LittleEndian.Uint32(src))
		if n < 1 || 4+n > len(src) {
			return dst, nil, false
		}
		s := src[4 : 4+n-1]
		if !plain(s) {
			return dst, nil, false
		}
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), src[4+n:], true
	case 0x10: // int32
		if len(src) < 4 {
			return dst, nil, false
		}
		return strconv.AppendInt(dst, int64(int32(binary.LittleEndian.Uint32(src))), 10), src[4:], true
	case 0x12: // int64
		if len(src) < 8 {
			return dst, nil, false
		}
		return strconv.AppendInt(dst, int64(binary.LittleEndian.Uint64(src)), 10), src[8:], true
	case 0x08: // boolean
		if len(src) < 1 || src[0] > 1 {
			return dst, nil, false
		}
		if src[0] == 1 {
			return append(dst, "true"...), src[1:], true
		}
		return append(dst, "false"...), src[1:], true
	case 0x0A: // null
		return append(dst, "null"...), src, true
	case 0x03, 0x04: // embedded document, array
		if len(src) < 5 {
			return dst, nil, false
		}
		n := int(binary.LittleEndian.Uint32(src))
		if n < 5 || n > len(src) {
			return dst, nil, false
		}
		var ok bool
		dst, ok = appendRelaxedJSON(dst, src[:n], t == 0x04)
		return dst, src[n:], ok
	}
	return dst, nil, false
}

// plain reports whether s is printable ASCII without '"' or '\': JSON
// that needs no escape.
func plain(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
