package envd

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
)

// TestJSONCodecWritesWhatProtojsonWrites checks the stream messages jsonCodec writes by
// hand against protojson, Connect's own JSON codec: the same JSON value, and read back
// by protojson, the same message.
func TestJSONCodecWritesWhatProtojsonWrites(t *testing.T) {
	str := func(s string) *string { return &s }
	events := []struct {
		name string
		ev   *pb.ProcessEvent
	}{
		{"no event", nil},
		{"empty event", &pb.ProcessEvent{}},
		{"start", &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 4294967295}}}},
		{"start pid 0", &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{}}}},
		{"start nil", &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{}}},
		{"stdout", &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
			Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hello\n\x00\xff\xfe")}}}}},
		{"stdout empty", &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
			Output: &pb.ProcessEvent_DataEvent_Stdout{}}}}},
		{"stderr", &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
			Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: []byte("ab")}}}}},
		{"pty", &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
			Output: &pb.ProcessEvent_DataEvent_Pty{Pty: []byte("\x1b[0mx")}}}}},
		{"data without output", &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{}}}},
		{"end exit 0", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
			Exited: true, Status: "exit status 0"}}}},
		{"end exit 1", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
			ExitCode: 1, Exited: true, Status: "exit status 1"}}}},
		{"end signalled", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
			ExitCode: -1, Status: "signal: killed", Error: str("signal: killed")}}}},
		{"end empty error", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
			ExitCode: -2147483648, Error: str("")}}}},
		{"end escapes", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
			Status: "a\"b\\c\n\r\t\x01\x1f\x7f<>&é\u2028😀", Error: str("\x00")}}}},
		{"end nil", &pb.ProcessEvent{Event: &pb.ProcessEvent_End{}}},
		{"keepalive", &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}},
	}
	codec := jsonCodec{"json"}
	for _, tt := range events {
		for _, msg := range []proto.Message{&pb.StartResponse{Event: tt.ev}, &pb.ConnectResponse{Event: tt.ev}} {
			t.Run(tt.name+"/"+string(msg.ProtoReflect().Descriptor().Name()), func(t *testing.T) {
				want, err := protojson.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				got, err := codec.MarshalAppend([]byte("prefix"), msg)
				if err != nil {
					t.Fatal(err)
				}
				if string(got[:6]) != "prefix" {
					t.Fatalf("MarshalAppend replaced what it appends to: %q", got)
				}
				got = got[6:]
				var gotValue, wantValue any
				if err := json.Unmarshal(got, &gotValue); err != nil {
					t.Fatalf("%s is not JSON: %v", got, err)
				}
				if err := json.Unmarshal(want, &wantValue); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(gotValue, wantValue) {
					t.Errorf("jsonCodec wrote %s, protojson %s", got, want)
				}
				back := msg.ProtoReflect().New().Interface()
				if err := protojson.Unmarshal(got, back); err != nil {
					t.Fatalf("protojson cannot read %s: %v", got, err)
				}
				if !proto.Equal(back, msg) {
					t.Errorf("%s reads back as %v, not %v", got, back, msg)
				}
			})
		}
	}
}

// TestJSONCodecInvalidUTF8 checks that a string protojson refuses to write is refused
// alike.
func TestJSONCodecInvalidUTF8(t *testing.T) {
	msg := &pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{Status: "\xff"}}}}
	if _, err := protojson.Marshal(msg); err == nil {
		t.Fatal("protojson wrote invalid UTF-8")
	}
	if got, err := (jsonCodec{"json"}).Marshal(msg); err == nil {
		t.Fatalf("jsonCodec wrote invalid UTF-8: %s", got)
	}
}

// TestJSONCodecReadsWhatProtojsonReads checks jsonCodec's reading of StartRequest
// against protojson's, and that the requests the SDKs send are read without it.
func TestJSONCodecReadsWhatProtojsonReads(t *testing.T) {
	tests := []struct {
		name string
		json string
		// direct is whether readStartRequest reads it (else protojson does).
		direct bool
	}{
		{"sdk command", `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi > /tmp/x"],"envs":{},"cwd":"/home/user"},"stdin":false}`, true},
		{"sdk command with envs and tag", ` { "process" : { "cmd" : "/bin/bash" , "args" : [ "-l" , "-c" , "é 😀" ] , "envs" : { "A" : "1" , "B" : "" } } , "tag" : "t" , "stdin" : true } `, true},
		{"empty", `{}`, true},
		{"empty config", `{"process":{}}`, true},
		{"empty args and envs", "{\"process\":{\"cmd\":\"x\",\"args\":[],\"envs\":{}}}\n", true},
		{"empty strings", `{"process":{"cmd":"","cwd":""},"tag":""}`, true},
		{"escape", `{"process":{"cmd":"a\"b","args":["\u00e9\n"]}}`, false},
		{"pty", `{"process":{"cmd":"bash"},"pty":{"size":{"cols":80,"rows":24}}}`, false},
		{"unknown field", `{"process":{"cmd":"bash","other":1},"more":[1,{"a":null}]}`, false},
		{"null", `{"process":null,"tag":null}`, false},
		{"duplicate field", `{"process":{"cmd":"a","cmd":"b"}}`, false},
		{"duplicate process", `{"process":{"cmd":"a"},"process":{"cmd":"b"}}`, false},
		{"duplicate map key", `{"process":{"envs":{"A":"1","A":"2"}}}`, false},
		{"wrong type", `{"process":{"cmd":1}}`, false},
		{"stdin as string", `{"stdin":"true"}`, false},
		{"stdin truncated", `{"stdin":tru`, false},
		{"stdin followed by garbage", `{"stdin":truex}`, false},
		{"trailing data", `{"process":{"cmd":"a"}}x`, false},
		{"two objects", `{}{}`, false},
		{"trailing comma", `{"process":{"cmd":"a",}}`, false},
		{"unterminated string", `{"process":{"cmd":"a`, false},
		{"control character", "{\"process\":{\"cmd\":\"a\tb\"}}", false},
		{"invalid utf-8", "{\"process\":{\"cmd\":\"\xff\"}}", false},
		{"invalid utf-8 key", "{\"process\":{\"envs\":{\"\xff\":\"a\"}}}", false},
		{"not an object", `[]`, false},
		{"json name of another message", `{"process":{"exitCode":1}}`, false},
	}
	codec := jsonCodec{"json"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := &pb.StartRequest{}
			wantErr := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(tt.json), want)
			got := &pb.StartRequest{Tag: proto.String("left over")}
			err := codec.Unmarshal([]byte(tt.json), got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("jsonCodec: %v, protojson: %v", err, wantErr)
			}
			if err == nil && !proto.Equal(got, want) {
				t.Errorf("jsonCodec read %v, protojson %v", got, want)
			}
			if direct := readStartRequest([]byte(tt.json), &pb.StartRequest{}); direct != tt.direct {
				t.Errorf("read directly: %v, want %v", direct, tt.direct)
			}
		})
	}
}
