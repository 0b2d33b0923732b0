// Package listing holds what the list routes (sandboxes, snapshots) share, in the core
// and in its features: the caller's tenant (all tenants for the platform admin), a
// filter on states, newest first, and OpenSandbox's page numbers starting at 1.
package listing

import (
	"cmp"
	"sort"
	"strings"
	"time"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/principal"
)

// Tenant is the tenant whose records caller lists; "" lists every tenant's.
func Tenant(caller principal.Caller) string {
	if caller.Admin {
		return ""
	}
	return caller.Tenant
}

// StateFilter admits the states a list query names, matched without case; an empty
// query admits every state.
type StateFilter map[string]bool

// NewStateFilter is the filter of states.
func NewStateFilter(states []string) StateFilter {
	f := StateFilter{}
	for _, st := range states {
		f[strings.ToLower(st)] = true
	}
	return f
}

// Admits reports whether state passes the filter.
func (f StateFilter) Admits(state string) bool { return len(f) == 0 || f[strings.ToLower(state)] }

// DefaultPageSize is a list's page size when the caller names none.
const DefaultPageSize = 20

// Page sorts items newest first (by createdAt) and returns page (from 1) of size items
// with its pagination; a page below 1 is the first, a size below 1 DefaultPageSize.
func Page[T any](items []T, createdAt func(T) time.Time, page, size int) ([]T, apiproto.Pagination) {
	page, size = max(page, 1), cmp.Or(max(size, 0), DefaultPageSize)
	sort.SliceStable(items, func(i, j int) bool { return createdAt(items[i]).After(createdAt(items[j])) })
	total := len(items)
	pages := (total + size - 1) / size
	start := min((page-1)*size, total)
	end := min(start+size, total)
	return items[start:end], apiproto.Pagination{Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages}
}
