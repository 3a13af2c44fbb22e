package live

import (
	"testing"

	"github.com/canon-sync/canon/producer"
)

// A push message takes what an HTTP push takes: the default limits agree
// (live does not import producer, so it cannot name the constant).
func TestDefaultMaxMessageBytesIsThePushLimit(t *testing.T) {
	if DefaultMaxMessageBytes != producer.DefaultMaxBodyBytes {
		t.Fatalf("DefaultMaxMessageBytes = %d, the producer's DefaultMaxBodyBytes = %d", DefaultMaxMessageBytes, producer.DefaultMaxBodyBytes)
	}
}
