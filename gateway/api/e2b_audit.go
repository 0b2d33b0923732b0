package api

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/plugins"
)

// The audit of calls through the E2B door into a sandbox's agent: a process started
// through envd and a cell run by the code interpreter are command.started events, a
// file written through envd a file.written event, as the same calls through the
// OpenSandbox door are (Handler.noteAgentCall), so that the tenant's audit stream and
// plugins see one story whichever SDK was used.

// Paths, on the agent, of the calls the door notes.
const (
	e2bPathProcessStart = "/envd/process.Process/Start"
	e2bPathFiles        = "/envd/files"
	e2bPathExecute      = "/e2b-code/execute"
)

// e2bNoteAgentCall notes r, a POST to the agent at path, in the sandbox's audit when it
// starts a process, runs a cell or writes a file through the agent's envd or
// code-interpreter mount, reading at most maxNotedBody bytes of the body (readNotedBody).
func (h *Handler) e2bNoteAgentCall(r *http.Request, sb *gateway.SandboxRecord, path string) {
	switch path {
	case e2bPathProcessStart, e2bPathExecute:
		head := readNotedBody(r)
		text := e2bCommandText(connectMessage(head))
		if len(text) > 1024 {
			text = text[:1024] + "…"
		}
		h.svc.Events().RecordAgentCall(sb, plugins.EventCommandStarted, map[string]any{"endpoint": path, "command": text})
	case e2bPathFiles:
		h.svc.Events().RecordAgentCall(sb, plugins.EventFileWritten, map[string]any{"endpoint": path, "path": r.URL.Query().Get("path"), "bytes": r.ContentLength})
	}
}

// connectMessage is the JSON of a Connect request body: the first message of a
// stream's envelope (a flags byte, a 4-byte length, the message), or the body itself
// for a unary call.
func connectMessage(body []byte) []byte {
	if len(body) >= 5 && (body[0] == 0 || body[0] == 1) {
		n := binary.BigEndian.Uint32(body[1:5])
		if rest := body[5:]; uint64(n) <= uint64(len(rest)) {
			return rest[:n]
		}
		return body[5:]
	}
	return body
}

// e2bCommandText is what a process start or a code cell runs: the process's command
// and arguments, or the cell's code.
func e2bCommandText(msg []byte) string {
	var body struct {
		Process struct {
			Cmd  string   `json:"cmd"`
			Args []string `json:"args"`
		} `json:"process"`
		Code string `json:"code"`
	}
	_ = json.Unmarshal(msg, &body)
	if body.Code != "" {
		return body.Code
	}
	return strings.TrimSpace(body.Process.Cmd + " " + strings.Join(body.Process.Args, " "))
}
