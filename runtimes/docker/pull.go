package docker

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
)

// PullPolicy says when a create pulls its image from a registry.
type PullPolicy string

// Pull policies (SANDGATE_PULL).
const (
	// PullMissing pulls an image only when the engine does not have it (the default).
	PullMissing PullPolicy = "missing"
	// PullNever never pulls: an image the engine lacks is SANDBOX::IMAGE_NOT_FOUND.
	PullNever PullPolicy = "never"
	// PullAlways pulls on every create, so a moved tag is followed.
	PullAlways PullPolicy = "always"
)

// ParsePullPolicy accepts "", never, missing and always ("" is missing).
func ParsePullPolicy(s string) (PullPolicy, error) {
	switch p := PullPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PullMissing, nil
	case PullMissing, PullNever, PullAlways:
		return p, nil
	}
	return "", fmt.Errorf("pull policy %q: want never, missing or always", s)
}

// PullProgress is runtimes.PullProgress.
type PullProgress = runtimes.PullProgress

// pulls shares one engine pull among concurrent creates of one image with the same
// credentials: the second create waits for the first one's pull instead of starting its
// own.
type pulls struct {
	mu       sync.Mutex
	inFlight map[string]*pullCall
}

type pullCall struct {
	done chan struct{}
	err  error
}

// pullKey identifies a pull: the image and a digest of the credentials (never the
// credentials themselves), so that a create with other credentials does not ride on a
// pull it might not be allowed to make.
func pullKey(image string, auth *runtimes.ImageAuth) string {
	if auth == nil {
		return image
	}
	h := sha256.Sum256([]byte(auth.Username + "\x00" + auth.Password))
	return image + "\x00" + base64.RawStdEncoding.EncodeToString(h[:12])
}

// ensureImage makes image present on the engine for tenant as the pull policy says,
// pulling it with auth when it must, and returns the id of the image the create is to
// run. Another tenant's snapshot is absent for tenant (findImage), before a pull and
// after one.
func (r *Runtime) ensureImage(ctx context.Context, image, tenant string, auth *runtimes.ImageAuth) (string, error) {
	inspect, present, err := r.findImage(ctx, image, tenant)
	if err != nil {
		return "", err
	}
	switch r.opts.Pull {
	case PullNever:
		if !present {
			return "", notPresent(image)
		}
		return inspect.ID, nil
	case PullAlways:
	default:
		if present {
			return inspect.ID, nil
		}
	}
	if err := r.Pull(ctx, image, auth, nil); err != nil {
		return "", err
	}
	inspect, present, err = r.findImage(ctx, image, tenant)
	if err != nil {
		return "", err
	}
	if !present {
		return "", notPresent(image)
	}
	return inspect.ID, nil
}

func notPresent(image string) error {
	return fmt.Errorf("image %q is not present on the engine: %w", image, runtimes.ErrImageNotFound)
}

// Pull pulls image with auth (nil for anonymous), sharing the pull with any concurrent
// one of the same image and credentials. progress, when set, is called as the engine
// reports layers (only by the caller that started the pull). A registry that is an
// address of the platform is refused before the engine is asked
// (*runtimes.RegistryRefusedError); a pull the engine fails is a *runtimes.PullError
// with one of the fixed reasons (pullReason).
func (r *Runtime) Pull(ctx context.Context, image string, auth *runtimes.ImageAuth, progress func(PullProgress)) error {
	if err := r.CheckRegistry(ctx, image); err != nil {
		return err
	}
	key := pullKey(image, auth)
	r.pulls.mu.Lock()
	if r.pulls.inFlight == nil {
		r.pulls.inFlight = map[string]*pullCall{}
	}
	if c, ok := r.pulls.inFlight[key]; ok {
		r.pulls.mu.Unlock()
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &pullCall{done: make(chan struct{})}
	r.pulls.inFlight[key] = c
	r.pulls.mu.Unlock()

	// The pull belongs to every create waiting on it: one caller giving up must not
	// break it off for the others.
	c.err = r.pull(context.WithoutCancel(ctx), image, auth, progress)
	r.pulls.mu.Lock()
	delete(r.pulls.inFlight, key)
	r.pulls.mu.Unlock()
	close(c.done)
	return c.err
}

func (r *Runtime) pull(ctx context.Context, image string, auth *runtimes.ImageAuth, progress func(PullProgress)) error {
	opts := client.ImagePullOptions{}
	if auth != nil {
		js, err := json.Marshal(registry.AuthConfig{Username: auth.Username, Password: auth.Password})
		if err != nil {
			return err
		}
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(js)
	}
	// Only the image and whether credentials came along are logged, never them.
	r.log.Info("pulling image", "image", image, "with_credentials", auth != nil)
	r.pullCount.Add(1)
	resp, err := r.cli.ImagePull(ctx, image, opts)
	if err != nil {
		return pullError(image, err)
	}
	layers := map[string]*PullProgress{}
	var order []string
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return pullError(image, err)
		}
		if msg.Error != nil {
			reason, denied := runtimes.PullReason(msg.Error.Code, msg.Error.Message)
			return &runtimes.PullError{Image: image, Reason: reason, Denied: denied}
		}
		if progress == nil || msg.ID == "" {
			continue
		}
		l, ok := layers[msg.ID]
		if !ok {
			// Only layer lines ("Pulling fs layer", "Downloading", …) have an id; the tag
			// line ("Pulling from …") does too, and is told apart by its status.
			if !strings.HasPrefix(msg.Status, "Pulling fs layer") && !strings.HasPrefix(msg.Status, "Waiting") &&
				!strings.HasPrefix(msg.Status, "Downloading") && !strings.HasPrefix(msg.Status, "Already exists") {
				continue
			}
			l = &PullProgress{}
			layers[msg.ID] = l
			order = append(order, msg.ID)
		}
		switch {
		case strings.HasPrefix(msg.Status, "Downloading") && msg.Progress != nil:
			l.BytesTotal, l.BytesCompleted = msg.Progress.Total, msg.Progress.Current
		case strings.HasPrefix(msg.Status, "Pull complete"), strings.HasPrefix(msg.Status, "Already exists"):
			l.LayersDone = 1
			if l.BytesTotal > 0 {
				l.BytesCompleted = l.BytesTotal
			}
		}
		sum := PullProgress{Layers: len(order)}
		for _, id := range order {
			sum.LayersDone += layers[id].LayersDone
			sum.BytesTotal += layers[id].BytesTotal
			sum.BytesCompleted += layers[id].BytesCompleted
		}
		progress(sum)
	}
	if progress != nil {
		// An image whose layers the engine already had reports no layer lines: the
		// final figures come from the image itself.
		if inspect, err := r.cli.ImageInspect(ctx, image); err == nil && inspect.RootFS.Layers != nil {
			n := len(inspect.RootFS.Layers)
			size := inspect.Size
			progress(PullProgress{Layers: n, LayersDone: n, BytesTotal: size, BytesCompleted: size})
		}
	}
	r.log.Info("pulled image", "image", image)
	return nil
}

// PullCount is how many engine pulls this runtime has started (concurrent creates of one
// image count once).
func (r *Runtime) PullCount() int64 { return r.pullCount.Load() }

// pullError turns an engine error into a PullError with one of the fixed reasons.
func pullError(image string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	code := 0
	switch {
	case cerrdefs.IsUnauthorized(err):
		code = 401
	case cerrdefs.IsPermissionDenied(err):
		code = 403
	case cerrdefs.IsNotFound(err):
		code = 404
	case cerrdefs.IsInvalidArgument(err):
		code = 400
	}
	reason, denied := runtimes.PullReason(code, err.Error())
	return &runtimes.PullError{Image: image, Reason: reason, Denied: denied}
}
