package usage

import (
	"os"
	"testing"

	"github.com/istota/istota/sidecar/internal/store/storetest"
)

// testDBs opens the tests' databases: SQLite files, or PostgreSQL in the run
// TestOnPostgres starts.
var testDBs storetest.DBs

func TestMain(m *testing.M) { os.Exit(storetest.Main(m, &testDBs)) }

// TestOnPostgres runs every test of this package again on a real PostgreSQL.
func TestOnPostgres(t *testing.T) { storetest.RunOnPostgres(t) }
