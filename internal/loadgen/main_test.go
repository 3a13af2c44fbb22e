package loadgen

import (
	"testing"

	"github.com/canon-sync/canon/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
