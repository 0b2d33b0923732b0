package gateway

import "github.com/sandgate/sandgate/gateway/internal/listing"

// DefaultPageSize is a list's page size when the caller names none (package
// gateway/internal/listing holds the filtering and paging the list routes share).
const DefaultPageSize = listing.DefaultPageSize
