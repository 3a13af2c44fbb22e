package schemas

import "testing"

// The first six vectors are Kafka's own (UtilsTest.testMurmur2); the rest
// were computed with kafka-clients 4.2.0's Utils.murmur2 and
// Utils.toPositive(h) % n.
func TestMurmur2MatchesKafka(t *testing.T) {
	tests := []struct {
		key    string
		hash   int32
		part12 int32
		part7  int32
	}{
		{"21", -973932308, 0, 3},
		{"foobar", -790332482, 6, 0},
		{"a-little-bit-long-string", -985981536, 8, 1},
		{"a-little-bit-longer-string", -1486304829, 11, 0},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 5, 3},
		{"abc", 479470107, 3, 4},
		{"acme/roadmap", -2069114572, 4, 2},
		{"org-1/project-42", 1220250300, 0, 3},
		{"", 275646681, 9, 2},
	}
	for _, tt := range tests {
		if got := Murmur2([]byte(tt.key)); got != tt.hash {
			t.Errorf("Murmur2(%q) = %d, want %d", tt.key, got, tt.hash)
		}
		if got := Partition([]byte(tt.key), 12); got != tt.part12 {
			t.Errorf("Partition(%q, 12) = %d, want %d", tt.key, got, tt.part12)
		}
		if got := Partition([]byte(tt.key), 7); got != tt.part7 {
			t.Errorf("Partition(%q, 7) = %d, want %d", tt.key, got, tt.part7)
		}
	}
}

func TestProjectKey(t *testing.T) {
	if got := string(ProjectKey("acme", "roadmap")); got != "acme/roadmap" {
		t.Fatalf("ProjectKey = %q", got)
	}
}
