package docker

import (
	"context"
	"errors"
	"strings"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// WatchDeaths reports each sandbox whose main container stops, as the engine emits it
// (its event stream), until ctx ends or the stream breaks (then it returns the error;
// the caller reopens it). The death of a sandbox's network namespace holder (holders.go)
// is reported as the sandbox's: its workload runs on, but without a network interface,
// unreachable. Other helper containers (the egress enforcer, which the reconciler
// restores) are not reported, nor containers being removed.
func (r *Runtime) WatchDeaths(ctx context.Context, dead func(id string)) error {
	// No label filter: the engine ANDs label filters, and holders have no sandbox id.
	res := r.cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).
		Add("type", "container").Add("event", "die")})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err, ok := <-res.Err:
			if !ok || err == nil {
				return errors.New("docker event stream ended")
			}
			return err
		case m := <-res.Messages:
			id := m.Actor.Attributes[runtimes.LabelID]
			if m.Actor.Attributes[labelRole] == roleNetns {
				name := m.Actor.Attributes["name"]
				if rest, ok := strings.CutPrefix(name, "sandgate-"); ok && !strings.HasPrefix(name, sparePrefix) {
					id, _ = strings.CutSuffix(rest, "-net")
					if holderName(id) != name {
						continue
					}
				} else {
					continue
				}
			} else if id == "" || m.Actor.Attributes["name"] != containerName(id) {
				continue
			}
			// A removal (the gateway's own deletes) kills the container too: the engine
			// marks it "removing" first. Only a death by itself is reported.
			c, err := r.cli.ContainerInspect(ctx, m.Actor.ID, client.ContainerInspectOptions{})
			if err != nil || c.Container.State == nil || c.Container.State.Status == "removing" || c.Container.State.Running {
				continue
			}
			dead(id)
		}
	}
}
