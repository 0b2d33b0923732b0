package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/eventlog"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// The diagnostics of one sandbox, as OpenSandbox's Diagnostics API shapes them
// (specs/diagnostic-api.yml, which its CLI's `osb diagnostics logs|events` reads): a
// descriptor carrying display text inline, never a schema to parse line by line.

// DiagnosticContent is the answer of both diagnostics routes. Content is always
// present (delivery is always inline), even when empty.
type DiagnosticContent struct {
	SandboxID string `json:"sandboxId"`
	// Kind is "logs" or "events"; Scope the scope the text was gathered for.
	Kind          string `json:"kind"`
	Scope         string `json:"scope"`
	Delivery      string `json:"delivery"`
	ContentType   string `json:"contentType"`
	Content       string `json:"content"`
	ContentLength int    `json:"contentLength"`
	// Truncated says that older lines were left out to keep the answer bounded.
	Truncated bool     `json:"truncated"`
	Warnings  []string `json:"warnings,omitempty"`
}

// Bounds of a diagnostics answer.
const (
	// diagnosticLogLines is how many of the newest lines of output the logs carry.
	diagnosticLogLines = 1000
	// diagnosticEvents is how many of the newest events the events carry.
	diagnosticEvents = 500
)

// The scopes each kind serves. Logs: "container" is the workload's output (stdout and
// stderr); "all" is the same, the only log sandgate has of a sandbox. Events:
// "lifecycle" is the sandbox.* events the gateway records (created, paused, renewed,
// failed, deleted…); "runtime" is the same text, since sandgate keeps no engine events
// of its own (its answer says so in warnings); "all" is every event recorded about the
// sandbox (commands, previews, policy decisions too).
var (
	logScopes   = []string{"container", "all"}
	eventScopes = []string{"lifecycle", "runtime", "all"}
)

func checkScope(kind, scope string, known []string) error {
	if scope == "" {
		return invalid("query parameter scope is required for diagnostic %s: one of %s", kind, strings.Join(known, ", "))
	}
	if !slices.Contains(known, scope) {
		return invalid("diagnostic %s have no scope %q: want one of %s", kind, scope, strings.Join(known, ", "))
	}
	return nil
}

func inlineText(id, kind, scope, text string) *DiagnosticContent {
	return &DiagnosticContent{SandboxID: id, Kind: kind, Scope: scope, Delivery: "inline",
		ContentType: "text/plain; charset=utf-8", Content: text, ContentLength: len(text)}
}

// DiagnosticLogs returns the newest lines of a sandbox's output (the runtime's log of
// its main process, stdout and stderr together).
func (s *Service) DiagnosticLogs(ctx context.Context, caller Caller, id, scope string) (*DiagnosticContent, error) {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	if err := checkScope("logs", scope, logScopes); err != nil {
		return nil, err
	}
	text, err := s.runtime.Logs(ctx, sb.ID, diagnosticLogLines)
	var warnings []string
	switch {
	case errors.Is(err, runtimes.ErrNotFound):
		text = ""
		warnings = append(warnings, fmt.Sprintf("the sandbox (%s) has no container in the runtime now, so no output can be read", sb.State))
	case err != nil:
		return nil, &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "the runtime could not read the sandbox's output", Cause: err}
	}
	out := inlineText(sb.ID, "logs", scope, text)
	out.Truncated = strings.Count(text, "\n")+1 >= diagnosticLogLines
	out.Warnings = warnings
	return out, nil
}

// DiagnosticEvents returns the newest events the gateway recorded about a sandbox, one
// line each, oldest first: time, type, then the event's data as sorted key=value pairs.
func (s *Service) DiagnosticEvents(ctx context.Context, caller Caller, id, scope string) (*DiagnosticContent, error) {
	sb, err := s.Lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	if err := checkScope("events", scope, eventScopes); err != nil {
		return nil, err
	}
	q := EventQuery{Tenant: sb.Tenant, Sandbox: sb.ID, Limit: diagnosticEvents, Newest: true}
	if scope != "all" {
		q.Types = []string{"sandbox."}
	}
	page, err := s.eventLog.Read(ctx, q)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for i := len(page.Items) - 1; i >= 0; i-- {
		writeEventLine(&b, page.Items[i])
	}
	out := inlineText(sb.ID, "events", scope, b.String())
	if page.NextCursor != "" {
		if len(page.Items) == diagnosticEvents {
			out.Truncated = true
		} else {
			out.Warnings = append(out.Warnings, fmt.Sprintf("only the tenant's %d most recent events were searched; older events of this sandbox are not shown", eventlog.ScanMax))
		}
	}
	if scope == "runtime" {
		out.Warnings = append(out.Warnings, "sandgate keeps no events of the container engine; these are the sandbox's lifecycle events as the gateway recorded them")
	}
	return out, nil
}

// writeEventLine renders one event: "2026-03-25T10:01:13Z sandbox.paused key=k1".
func writeEventLine(b *strings.Builder, ev store.Event) {
	b.WriteString(ev.Time.UTC().Format(time.RFC3339))
	b.WriteByte(' ')
	b.WriteString(ev.Type)
	data := ev.DataMap()
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// A value with a space, quote or line break is quoted: one event, one line.
		v := fmt.Sprint(data[k])
		if strings.ContainsAny(v, " \t\r\n\"=") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(b, " %s=%s", k, v)
	}
	b.WriteByte('\n')
}
