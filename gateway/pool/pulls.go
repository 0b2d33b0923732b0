package pool

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/runtimes"
)

// ImagePull is the progress of a pool's one pull of its image: state Pulling, Ready or
// Failed (message then has the registry's reason; the pool makes no members).
type ImagePull struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	runtimes.PullProgress
}

// Image pull states.
const (
	ImagePulling = "Pulling"
	ImageReady   = "Ready"
	ImageFailed  = "Failed"
)

// StartPull pulls a new pool's image once, in the background, with the template's
// credentials (auth may be nil); the pool's status shows the progress (Pull), and the
// manager fills the pool only once the pull is done.
func (m *Manager) StartPull(key, image string, auth *runtimes.ImageAuth, ip runtimes.ImagePuller) {
	st := &ImagePull{State: ImagePulling}
	m.mu.Lock()
	if m.pulls == nil {
		m.pulls = map[string]*ImagePull{}
	}
	m.pulls[key] = st
	m.mu.Unlock()
	m.group.Go(func() {
		ctx, cancel := context.WithTimeout(m.group.Context(), 30*time.Minute)
		defer cancel()
		err := ip.Pull(ctx, image, auth, func(p runtimes.PullProgress) {
			m.mu.Lock()
			st.PullProgress = p
			m.mu.Unlock()
		})
		m.mu.Lock()
		if err != nil {
			st.State = ImageFailed
			st.Message = m.host.ImageError(image, err).Error()
		} else {
			st.State = ImageReady
		}
		m.mu.Unlock()
		if err != nil {
			m.log.Warn("pool image pull failed", "pool", key, "image", image, "err", err)
		}
		m.Kick()
	})
}

// Pull is a copy of a pool's pull status (nil when it made none on this gateway).
func (m *Manager) Pull(key string) *ImagePull {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.pulls[key]
	if !ok {
		return nil
	}
	c := *st
	return &c
}

// ClearPull forgets a pool's pull status.
func (m *Manager) ClearPull(key string) {
	m.mu.Lock()
	delete(m.pulls, key)
	m.mu.Unlock()
}
