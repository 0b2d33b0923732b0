package gateway

import "github.com/sandgate/sandgate/gateway/pool"

// PoolRequest is the body of POST /v1/pools and PUT /v1/pools/{name}, which the pool
// feature defines a pool from (pool.Manager.Create, Update).
type PoolRequest = pool.Request

// PoolStatus are a pool's live numbers.
type PoolStatus = pool.Status

// PoolImagePull is the progress of a pool's one pull of its image: state Pulling, Ready
// or Failed (message then has the registry's reason; the pool makes no members).
type PoolImagePull = pool.ImagePull

// Pool image pull states.
const (
	PoolImagePulling = pool.ImagePulling
	PoolImageReady   = pool.ImageReady
	PoolImageFailed  = pool.ImageFailed
)

// PoolView is the API form of a pool.
type PoolView = pool.View

// Pools is the warm pool feature: gateway/api calls it to define, read and delete pools.
func (s *Service) Pools() *pool.Manager { return s.pool }
