package app

import (
	"context"
	"errors"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/store"
)

// Leases serve hostapi's leases of physical benches from the state store.
func Leases(s *store.Store) hostapi.Leases { return leases{s} }

type leases struct{ s *store.Store }

var _ hostapi.Leases = leases{}

func (l leases) Lease(ctx context.Context, bench, holder string, d time.Duration, now time.Time) (hostapi.Lease, error) {
	got, err := l.s.Lease(ctx, bench, holder, d, now)
	return hostapi.Lease(got), held(err)
}

func (l leases) Release(ctx context.Context, bench, holder string, now time.Time) error {
	return held(l.s.Release(ctx, bench, holder, now))
}

func (l leases) LeaseOf(ctx context.Context, bench string, now time.Time) (hostapi.Lease, bool, error) {
	got, ok, err := l.s.LeaseOf(ctx, bench, now)
	return hostapi.Lease(got), ok, err
}

// held says the store's refusal in hostapi's words.
func held(err error) error {
	var h *store.HeldError
	if errors.As(err, &h) {
		return &hostapi.LeaseHeld{Holder: h.Holder, Until: h.Until}
	}
	return err
}
