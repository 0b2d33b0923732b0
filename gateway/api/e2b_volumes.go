package api

import (
	"net/http"

	"github.com/sandgate/sandgate/gateway"
)

// E2B's volumes through the door: the tenant's named volumes (the ones a create's
// volumes[].pvc mounts by claimName, namespaced per tenant by the core), made, listed,
// read and removed by the state feature. A volume's id is its name. E2B's volume
// content API (files of a volume without a sandbox, at E2B_VOLUME_API_URL with the
// volume's token) is not served: the token the door answers is e2bVolumeTokenUnserved,
// the same for every volume, which the gateway accepts for nothing.

// e2bVolumeTokenUnserved is the token of every volume the door describes. E2B's
// answer must carry one; this one opens nothing, here or anywhere.
const e2bVolumeTokenUnserved = "volume-content-api-not-served"

// e2bVolumeOwner owns the root directory of a volume the door makes: E2B's user `user`
// (uid and gid 1000 in E2B's templates and the door's), which E2B's SDKs run commands
// and file calls as, writes to a mounted volume without sudo, as on E2B.
var e2bVolumeOwner = gateway.VolumeOwner{UID: 1000, GID: 1000}

// e2bNewVolume is the body of POST /volumes.
type e2bNewVolume struct {
	Name string `json:"name"`
}

// e2bVolume is E2B's Volume, an item of GET /volumes.
type e2bVolume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// e2bVolumeAndToken is E2B's VolumeAndToken, the answer of a create and a get.
type e2bVolumeAndToken struct {
	e2bVolume
	Token string `json:"token"`
}

func e2bVolumeAnswer(v gateway.NamedVolume) e2bVolumeAndToken {
	return e2bVolumeAndToken{e2bVolume: e2bVolume{VolumeID: v.Name, Name: v.Name}, Token: e2bVolumeTokenUnserved}
}

// e2bCreateVolume is POST /volumes: 201 with the new volume.
func (h *Handler) e2bCreateVolume(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	var body e2bNewVolume
	if err := decodeJSON(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	v, err := h.svc.State().CreateNamedVolume(r.Context(), c, body.Name, &e2bVolumeOwner)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, e2bVolumeAnswer(v))
}

// e2bListVolumes is GET /volumes: the caller's named volumes.
func (h *Handler) e2bListVolumes(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	vols, err := h.svc.State().NamedVolumes(r.Context(), c)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := make([]e2bVolume, 0, len(vols))
	for _, v := range vols {
		out = append(out, e2bVolume{VolumeID: v.Name, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bGetVolume is GET /volumes/{id}.
func (h *Handler) e2bGetVolume(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	v, err := h.svc.State().NamedVolume(r.Context(), c, r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e2bVolumeAnswer(v))
}

// e2bDeleteVolume is DELETE /volumes/{id}: 204, 404 for a volume the caller has not,
// 409 for one a sandbox mounts.
func (h *Handler) e2bDeleteVolume(w http.ResponseWriter, r *http.Request, c gateway.Caller) {
	if err := h.svc.State().DeleteNamedVolume(r.Context(), c, r.PathValue("id")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
