package docker

import (
	"context"
	"errors"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// WatchDeaths reports each sandbox whose main container stops, as the engine emits it
// (its event stream), until ctx ends or the stream breaks (then it returns the error;
// the caller reopens it). Helper containers (the egress enforcer) are not reported, nor
// containers being removed.
func (r *Runtime) WatchDeaths(ctx context.Context, dead func(id string)) error {
	res := r.cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).
		Add("type", "container").Add("event", "die").Add("label", runtimes.LabelID)})
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
			if id == "" || m.Actor.Attributes["name"] != containerName(id) {
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
