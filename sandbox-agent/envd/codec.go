package envd

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
)

// jsonCodec is Connect's JSON codec (protojson, unknown fields discarded) with the
// messages of every command written and read directly: protojson's reflection costs
// more than the rest of such a message's way in or out.
//
// It writes the messages every process stream sends (StartResponse and ConnectResponse
// holding a start, data, end or keepalive event) as protojson writes them, in its
// compact form: the same field names, in field order, with proto3's omission of zero
// values (a oneof member and an optional field are written when set, zero or not) and
// bytes in padded standard base64. It reads a StartRequest without a terminal whose
// strings need no escapes (readStartRequest). Anything else goes to protojson.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(message any) ([]byte, error) { return c.MarshalAppend(nil, message) }

func (c jsonCodec) MarshalAppend(dst []byte, message any) ([]byte, error) {
	var ev *pb.ProcessEvent
	switch m := message.(type) {
	case *pb.StartResponse:
		ev = m.GetEvent()
	case *pb.ConnectResponse:
		ev = m.GetEvent()
	default:
		return marshalProtoJSON(dst, message)
	}
	if out, ok := appendEventResponse(dst, ev); ok {
		return out, nil
	}
	return marshalProtoJSON(dst, message)
}

func (c jsonCodec) Unmarshal(data []byte, message any) error {
	if req, ok := message.(*pb.StartRequest); ok && readStartRequest(data, req) {
		return nil
	}
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", message)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", message, err)
	}
	return nil
}

func marshalProtoJSON(dst []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", message)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

// appendEventResponse appends a response holding ev ({"event":…}); ok is false for an
// event it does not write (protojson then does).
func appendEventResponse(b []byte, ev *pb.ProcessEvent) ([]byte, bool) {
	if ev == nil {
		return append(b, "{}"...), true
	}
	b = append(b, `{"event":{`...)
	switch e := ev.GetEvent().(type) {
	case nil:
	case *pb.ProcessEvent_Start:
		b = append(b, `"start":{`...)
		if pid := e.Start.GetPid(); pid != 0 {
			b = append(b, `"pid":`...)
			b = strconv.AppendUint(b, uint64(pid), 10)
		}
		b = append(b, '}')
	case *pb.ProcessEvent_Data:
		b = append(b, `"data":{`...)
		switch out := e.Data.GetOutput().(type) {
		case nil:
		case *pb.ProcessEvent_DataEvent_Stdout:
			b = appendBytesField(b, "stdout", out.Stdout)
		case *pb.ProcessEvent_DataEvent_Stderr:
			b = appendBytesField(b, "stderr", out.Stderr)
		case *pb.ProcessEvent_DataEvent_Pty:
			b = appendBytesField(b, "pty", out.Pty)
		default:
			return nil, false
		}
		b = append(b, '}')
	case *pb.ProcessEvent_End:
		end := e.End
		hasError := end != nil && end.Error != nil
		if !utf8.ValidString(end.GetStatus()) || !utf8.ValidString(end.GetError()) {
			return nil, false // protojson refuses it
		}
		b = append(b, `"end":{`...)
		comma := false
		field := func(name string) {
			if comma {
				b = append(b, ',')
			}
			comma = true
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, `":`...)
		}
		if end.GetExitCode() != 0 {
			field("exitCode")
			b = strconv.AppendInt(b, int64(end.GetExitCode()), 10)
		}
		if end.GetExited() {
			field("exited")
			b = append(b, "true"...)
		}
		if end.GetStatus() != "" {
			field("status")
			b = appendJSONString(b, end.GetStatus())
		}
		if hasError {
			field("error")
			b = appendJSONString(b, end.GetError())
		}
		b = append(b, '}')
	case *pb.ProcessEvent_Keepalive:
		b = append(b, `"keepalive":{}`...)
	default:
		return nil, false
	}
	return append(b, "}}"...), true
}

func appendBytesField(b []byte, name string, data []byte) []byte {
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = base64.StdEncoding.AppendEncode(b, data)
	return append(b, '"')
}

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// readStartRequest reads data into req when it is a StartRequest in the plain form the
// SDKs send: process (cmd, args, envs, cwd), tag and stdin, each at most once, strings
// of valid UTF-8 without escapes, booleans as true or false. ok is false for anything
// else, req untouched: protojson then reads it (an unknown field, a terminal, null, an
// escape, a duplicate field or map key, trailing data, a mistake).
func readStartRequest(data []byte, req *pb.StartRequest) (ok bool) {
	r := jsonReader{b: data}
	var (
		config *pb.ProcessConfig
		tag    *string
		stdin  *bool
	)
	ok = r.object(func(key string) bool {
		switch key {
		case "process":
			if config != nil {
				return false
			}
			config = &pb.ProcessConfig{}
			return r.processConfig(config)
		case "tag":
			if tag != nil {
				return false
			}
			v, ok := r.str()
			tag = &v
			return ok
		case "stdin":
			if stdin != nil {
				return false
			}
			v, ok := r.boolean()
			stdin = &v
			return ok
		}
		return false
	})
	if !ok || !r.end() {
		return false
	}
	proto.Reset(req)
	req.Process, req.Tag, req.Stdin = config, tag, stdin
	return true
}

// jsonReader reads the plain JSON readStartRequest accepts; each method reports false
// for anything else.
type jsonReader struct {
	b []byte
	i int
}

func (r *jsonReader) processConfig(config *pb.ProcessConfig) bool {
	var seenCmd, seenArgs, seenEnvs bool
	return r.object(func(key string) bool {
		var ok bool
		switch key {
		case "cmd":
			if seenCmd {
				return false
			}
			seenCmd = true
			config.Cmd, ok = r.str()
			return ok
		case "args":
			if seenArgs {
				return false
			}
			seenArgs = true
			return r.array(func() bool {
				arg, ok := r.str()
				config.Args = append(config.Args, arg)
				return ok
			})
		case "envs":
			if seenEnvs {
				return false
			}
			seenEnvs = true
			config.Envs = map[string]string{}
			return r.object(func(name string) bool {
				if _, dup := config.Envs[name]; dup {
					return false
				}
				config.Envs[name], ok = r.str()
				return ok
			})
		case "cwd":
			if config.Cwd != nil {
				return false
			}
			cwd, ok := r.str()
			config.Cwd = &cwd
			return ok
		}
		return false
	})
}

func (r *jsonReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next consumes c, after white space.
func (r *jsonReader) next(c byte) bool {
	r.space()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (r *jsonReader) end() bool {
	r.space()
	return r.i == len(r.b)
}

// object reads an object, calling member to read the value of each key.
func (r *jsonReader) object(member func(key string) bool) bool {
	if !r.next('{') {
		return false
	}
	if r.next('}') {
		return true
	}
	for {
		key, ok := r.str()
		if !ok || !r.next(':') || !member(key) {
			return false
		}
		if r.next(',') {
			continue
		}
		return r.next('}')
	}
}

// array reads an array, calling element to read each element.
func (r *jsonReader) array(element func() bool) bool {
	if !r.next('[') {
		return false
	}
	if r.next(']') {
		return true
	}
	for {
		if !element() {
			return false
		}
		if r.next(',') {
			continue
		}
		return r.next(']')
	}
}

// str reads a string without escapes or control characters, of valid UTF-8.
func (r *jsonReader) str() (string, bool) {
	if !r.next('"') {
		return "", false
	}
	start := r.i
	for r.i < len(r.b) {
		switch c := r.b[r.i]; {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return string(s), utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return "", false
		}
		r.i++
	}
	return "", false
}

func (r *jsonReader) boolean() (bool, bool) {
	r.space()
	switch rest := r.b[r.i:]; {
	case bytes.HasPrefix(rest, []byte("true")):
		r.i += 4
		return true, true
	case bytes.HasPrefix(rest, []byte("false")):
		r.i += 5
		return false, true
	}
	return false, false
}
