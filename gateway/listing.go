package gateway

import (
	"cmp"
	"sort"
	"strings"
	"time"
)

// The list routes (sandboxes, snapshots) share their filtering and paging: the caller's
// tenant (all tenants for the platform admin), a filter on states, newest first, and
// OpenSandbox's page numbers starting at 1.

// listTenant is the tenant whose records caller lists; "" lists every tenant's.
func listTenant(caller Caller) string {
	if caller.Admin {
		return ""
	}
	return caller.Tenant
}

// stateFilter admits the states a list query names, matched without case; an empty
// query admits every state.
type stateFilter map[string]bool

func newStateFilter(states []string) stateFilter {
	f := stateFilter{}
	for _, st := range states {
		f[strings.ToLower(st)] = true
	}
	return f
}

func (f stateFilter) admits(state string) bool { return len(f) == 0 || f[strings.ToLower(state)] }

// DefaultPageSize is a list's page size when the caller names none.
const DefaultPageSize = 20

// pageOf sorts items newest first (by createdAt) and returns page (from 1) of size items
// with its pagination; a page below 1 is the first, a size below 1 DefaultPageSize.
func pageOf[T any](items []T, createdAt func(T) time.Time, page, size int) ([]T, Pagination) {
	page, size = max(page, 1), cmp.Or(max(size, 0), DefaultPageSize)
	sort.SliceStable(items, func(i, j int) bool { return createdAt(items[i]).After(createdAt(items[j])) })
	total := len(items)
	pages := (total + size - 1) / size
	start := min((page-1)*size, total)
	end := min(start+size, total)
	return items[start:end], Pagination{Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages}
}
