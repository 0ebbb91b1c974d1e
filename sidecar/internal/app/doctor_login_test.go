package app

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/istota/istota/sidecar/internal/config"
	"github.com/istota/istota/sidecar/internal/settings"
	"github.com/istota/istota/sidecar/internal/store"
)

// doctor says which credential is in use, and fails with what to do when the model API
// refused it (recorded by serve in the shared database).
func TestDoctorLogin(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()

	if _, err := doctorLogin(ctx, cfg, db); err == nil || !strings.Contains(err.Error(), "subscription token") {
		t.Fatalf("nothing set: %v", err)
	}
	cfg.Brain.APIKey = "sk-key"
	if got, err := doctorLogin(ctx, cfg, db); err != nil || !strings.Contains(got, "API key") {
		t.Fatalf("key: %q %v", got, err)
	}
	cfg.Brain.OAuthToken = "sk-ant-oat01-tok"
	got, err := doctorLogin(ctx, cfg, db)
	if err != nil || !strings.Contains(got, "subscription token") || !strings.Contains(got, "API key that is also set is not used") {
		t.Fatalf("token: %q %v", got, err)
	}
	st, err := settings.Open(ctx, db, cfg, settings.Options{DataDir: cfg.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RecordLoginRefused(ctx, 401); err != nil {
		t.Fatal(err)
	}
	_, err = doctorLogin(ctx, cfg, db)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "claude setup-token") || strings.Contains(err.Error(), "oat01-tok") {
		t.Fatalf("refused: %v", err)
	}
}
