package agent

import (
	"fmt"
	"net/http"
	"time"
)

// addTiming reports how long a step of the request took in a Server-Timing header
// ("spawn;dur=1.234", milliseconds). The gateway turns the agent's entries into spans
// of the request's trace: the agent itself exports nothing, since the sandbox's egress
// policy keeps it from reaching a trace collector. Call it before the header is written.
func addTiming(w http.ResponseWriter, step string, start time.Time) {
	w.Header().Add("Server-Timing", fmt.Sprintf("%s;dur=%.3f", step, float64(time.Since(start).Microseconds())/1000))
}
