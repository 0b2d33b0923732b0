package docker

// Bounds on the engine's log of each container the runtime makes.
//
// A workload's output (its entrypoint's stdout and stderr) goes to the engine's log of
// its container. The engine's default driver, json-file, keeps it on the engine's disk
// with no bound unless the operator's daemon.json sets one, so a sandbox that prints in
// a loop fills the disk every other sandbox and the host itself use, a read-only root
// notwithstanding. Where the engine's driver keeps logs on its own disk (json-file,
// local), every container the runtime makes names a size per file and two files at most
// (Options.ContainerLogMax); the diagnostics API reads the last lines across them. The
// engine merges its own other options of that driver in. Another driver (journald,
// syslog, a shipper) is the operator's, and left as it is, as is everything with "off".

import (
	"context"
	"fmt"
	"regexp"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// DefaultContainerLogMax is the size of each of a container's two log files when
// Options.ContainerLogMax is empty.
const DefaultContainerLogMax = "10m"

// containerLogFiles is how many log files of ContainerLogMax a container keeps.
const containerLogFiles = "2"

// logSize is the engine's size form: a number of bytes, or of k, m or g.
var logSize = regexp.MustCompile(`^[1-9][0-9]{0,9}[kmg]?$`)

// CheckContainerLogMax checks a ContainerLogMax value (SANDGATE_CONTAINER_LOG_MAX).
func CheckContainerLogMax(v string) error {
	if v == "" || v == "off" || logSize.MatchString(v) {
		return nil
	}
	return fmt.Errorf("%q: want a size such as 10m (bytes, or k, m, g), or off", v)
}

// chooseLogConfig sets the log configuration of every container the runtime makes, from
// ContainerLogMax and the engine's log driver.
func (r *Runtime) chooseLogConfig(ctx context.Context) error {
	limit := r.opts.ContainerLogMax
	if limit == "" {
		limit = DefaultContainerLogMax
	}
	if err := CheckContainerLogMax(limit); err != nil {
		return fmt.Errorf("container log bound %w", err)
	}
	if limit == "off" {
		return nil
	}
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return fmt.Errorf("docker info (its log driver): %w", err)
	}
	switch driver := info.Info.LoggingDriver; driver {
	case "json-file", "local":
		r.logConfig = container.LogConfig{Type: driver, Config: map[string]string{"max-size": limit, "max-file": containerLogFiles}}
	default:
		r.log.Info("the sandboxes' output goes to the engine's log driver, unbounded by sandgate", "driver", driver)
	}
	return nil
}
