package app

import (
	"slices"
	"testing"

	"github.com/istota/istota/sidecar/internal/config"
)

func TestLiveOriginsIncludePublicOrigins(t *testing.T) {
	cfg := config.Default()
	cfg.Nextcloud.URL = "http://nextcloud.internal:8080/"
	cfg.Server.PublicOrigins = []string{"https://Cloud.Example.com"}
	got := liveOrigins(cfg)
	if !slices.Equal(got, []string{"http://nextcloud.internal:8080", "https://cloud.example.com"}) {
		t.Fatalf("origins = %v", got)
	}
}
