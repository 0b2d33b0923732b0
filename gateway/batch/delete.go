package batch

import (
	"context"
	"errors"
	"sync"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// deleteConcurrency bounds the members deleted at once.
const deleteConcurrency = 8

// Delete deletes every member of a batch, then the batch.
func (m *Manager[T, Q]) Delete(ctx context.Context, caller principal.Caller, id string) error {
	b, _, err := m.lookup(ctx, caller, id)
	if err != nil {
		return err
	}
	recs, err := m.store.GetSandboxes(ctx, b.Members)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, deleteConcurrency)
	for _, rec := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func(rec *store.Sandbox) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := m.host.DeleteMember(ctx, caller, rec.ID, b.ID); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}(rec)
	}
	wg.Wait()
	if firstErr != nil {
		if _, ok := fault.AsError(firstErr); ok || errors.Is(firstErr, store.ErrUnavailable) {
			return firstErr
		}
		return &fault.Error{Kind: fault.KindInternal, Code: fault.CodeRuntimeError, Message: "some members could not be removed; retry the delete", Cause: firstErr}
	}
	return m.store.DeleteBatch(ctx, b)
}
