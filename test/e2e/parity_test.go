package e2e

import (
	"net/http"
	"os/exec"
	"testing"
)

// openSandboxCodeInterpreter is the image OpenSandbox's code-interpreter SDKs and examples
// create sandboxes from, and the entrypoint they give it; `make images` tags sandgate's
// code interpreter image under that name (images/opensandbox-alias.sh).
const (
	openSandboxCodeInterpreter      = "opensandbox/code-interpreter:latest"
	openSandboxCodeInterpreterEntry = "/opt/code-interpreter/code-interpreter.sh"
)

// TestCodeInterpreterOpenSandboxDefaults: a sandbox created the way the OpenSandbox
// code-interpreter SDKs create one (their default image and entrypoint, the JS SDK's
// default resource limits, a PYTHON_VERSION as their examples set) runs `1+1` and
// returns 2, through the same /code call their codes.run(code, {language}) makes.
func TestCodeInterpreterOpenSandboxDefaults(t *testing.T) {
	if err := exec.Command("docker", "image", "inspect", openSandboxCodeInterpreter).Run(); err != nil {
		t.Fatalf("image %s is missing: `make images` tags it (images/opensandbox-alias.sh)", openSandboxCodeInterpreter)
	}
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	for _, entry := range []string{openSandboxCodeInterpreterEntry, "/opt/opensandbox/code-interpreter.sh"} {
		t.Run(entry, func(t *testing.T) {
			r := g.do("POST", "/v1/sandboxes", map[string]any{
				"image":          map[string]any{"uri": openSandboxCodeInterpreter},
				"entrypoint":     []string{entry},
				"resourceLimits": map[string]string{"cpu": "1", "memory": "2Gi"},
				"env":            map[string]string{"PYTHON_VERSION": "3.11"},
				"metadata":       map[string]string{},
				"extensions":     map[string]string{},
				"secureAccess":   false,
				"timeout":        600,
			})
			if r.Status != http.StatusAccepted {
				t.Fatalf("create from %s with entrypoint %s: %d %s", openSandboxCodeInterpreter, entry, r.Status, r.Body)
			}
			id := r.JSON(t)["id"].(string)
			t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+id, nil) })
			a := g.agent(id).as(t)
			evs := a.stream("/code", map[string]any{"context": map[string]any{"language": "python"}, "code": "1+1"})
			got := ""
			for _, ev := range evs {
				if ev.Type == "result" {
					got, _ = ev.Results["text"].(string)
				}
			}
			if got != "2" || lastEvent(evs).Type != "execution_complete" {
				t.Fatalf("1+1 answered %q, events %v", got, eventTypes(evs))
			}
			// The entrypoint keeps running: the sandbox is still Running afterwards.
			if st := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)["state"]; st != "Running" {
				t.Fatalf("state after the code call: %v", st)
			}
		})
	}
}
