//go:build !cgo

package gpu

import (
	"context"
	"testing"
)

func TestOpenNVMLWithoutCgo(t *testing.T) {
	s, closeFn, status := OpenNVML()
	defer closeFn()
	if status != StatusNoCgo {
		t.Errorf("status = %q, want %q", status, StatusNoCgo)
	}
	if got := s.Sample(context.Background()); got.Status != StatusNoCgo || got.Devices != nil || got.Err != nil {
		t.Errorf("sample = %+v, want only status %q", got, StatusNoCgo)
	}
}
