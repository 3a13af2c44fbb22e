package sequencer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestPlanWarm(t *testing.T) {
	type m = warmMember
	cases := []struct {
		name    string
		members []warmMember
		n       int32
		want    [][]int32
	}{{
		name:    "a dead owner's partition goes to the standby, not to the cold member",
		members: []m{{owned: []int32{1}, copies: map[int32]int64{0: 900, 1: 1000}}, {owned: []int32{2}, copies: map[int32]int64{2: 500}}},
		n:       3,
		want:    [][]int32{{0, 1}, {2}},
	}, {
		name:    "the same with the members the other way round",
		members: []m{{owned: []int32{2}, copies: map[int32]int64{2: 500}}, {owned: []int32{1}, copies: map[int32]int64{0: 900, 1: 1000}}},
		n:       3,
		want:    [][]int32{{2}, {0, 1}},
	}, {
		name: "the most caught-up copy wins",
		members: []m{
			{owned: []int32{1}, copies: map[int32]int64{0: 100, 1: 7}},
			{owned: []int32{2}, copies: map[int32]int64{0: 950, 2: 7}},
			{owned: []int32{3}, copies: map[int32]int64{0: 900, 3: 7}},
		},
		n:    5,
		want: [][]int32{{1, 4}, {0, 2}, {3}},
	}, {
		name:    "balance before warmth: a member at its share gets no more, warm or not",
		members: []m{{owned: []int32{0, 1}, copies: map[int32]int64{0: 1, 1: 1, 2: 50, 3: 50}}, {owned: []int32{}, copies: nil}},
		n:       4,
		want:    [][]int32{{0, 1}, {2, 3}},
	}, {
		name:    "an overloaded owner keeps its share; the surplus goes to the warmest with room",
		members: []m{{owned: []int32{0, 1, 2, 3}}, {copies: map[int32]int64{3: 10}}, {copies: map[int32]int64{2: 10}}},
		n:       4,
		want:    [][]int32{{0, 1}, {3}, {2}},
	}, {
		name:    "stale claims (an older generation) do not count",
		members: []m{{generation: 4, owned: []int32{0, 1}}, {generation: 5, owned: []int32{1}, copies: map[int32]int64{0: 3}}},
		n:       2,
		want:    [][]int32{{0}, {1}},
	}, {
		name:    "cold start: round the members, in order",
		members: []m{{}, {}, {}},
		n:       7,
		want:    [][]int32{{0, 3, 6}, {1, 4}, {2, 5}},
	}, {
		name:    "claims out of range are ignored",
		members: []m{{owned: []int32{9, -1}}, {}},
		n:       2,
		want:    [][]int32{{0}, {1}},
	}, {
		name:    "more members than partitions",
		members: []m{{}, {copies: map[int32]int64{0: 5}}, {}},
		n:       1,
		want:    [][]int32{nil, {0}, nil},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planWarm(c.members, c.n)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("plan %v, want %v", got, c.want)
			}
			checkPlan(t, got, c.n)
		})
	}
}

// checkPlan checks that every partition is assigned exactly once and
// that the shares differ by at most one.
func checkPlan(t *testing.T, plan [][]int32, n int32) {
	t.Helper()
	seen := make([]int, n)
	lo, hi := int(n), 0
	for _, ps := range plan {
		for _, p := range ps {
			seen[p]++
		}
		lo, hi = min(lo, len(ps)), max(hi, len(ps))
	}
	for p, c := range seen {
		if c != 1 {
			t.Errorf("partition %d assigned %d times in %v", p, c, plan)
		}
	}
	if len(plan) > 0 && hi-lo > 1 {
		t.Errorf("unbalanced plan %v", plan)
	}
}

// TestPlanWarmProperties: whatever the members claim and hold, every
// partition is assigned once and the plan is balanced.
func TestPlanWarmProperties(t *testing.T) {
	seed := uint64(1)
	rnd := func(k int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % k
	}
	for range 2000 {
		n := int32(1 + rnd(12))
		ms := make([]warmMember, 1+rnd(5))
		for i := range ms {
			ms[i].generation = int32(rnd(3))
			ms[i].copies = map[int32]int64{}
			for range rnd(int(n) + 1) {
				ms[i].owned = append(ms[i].owned, int32(rnd(int(n)+2))-1)
				ms[i].copies[int32(rnd(int(n)))] = int64(rnd(1000))
			}
		}
		checkPlan(t, planWarm(ms, n), n)
	}
}

func TestMemberDataCodec(t *testing.T) {
	for _, c := range []map[int32]int64{nil, {}, {0: 0}, {3: 1 << 40, 0: 17, 1<<31 - 1: 1}} {
		for _, addr := range []string{"", "10.0.0.7:41234", "[::1]:7"} {
			got, gotAddr, err := decodeMemberData(encodeMemberData(c, addr))
			if err != nil || len(got) != len(c) || gotAddr != addr {
				t.Fatalf("round trip of %v, %q: %v, %q, %v", c, addr, got, gotAddr, err)
			}
			for p, o := range c {
				if got[p] != o {
					t.Errorf("round trip of %v: %v", c, got)
				}
			}
		}
	}
	// Version 1, the copies alone, as members of the previous release send.
	got, addr, err := decodeMemberData([]byte{1, 1, 3, 9})
	if err != nil || got[3] != 9 || len(got) != 1 || addr != "" {
		t.Errorf("version 1 data: %v, %q, %v", got, addr, err)
	}
	for _, bad := range [][]byte{{3}, {1}, {2}, {1, 1, 0}, {1, 0, 9}, {1, 1, 0xff, 0xff, 0xff, 0xff, 0x7f, 0},
		{2, 0}, {2, 0, 5, 'a'}, {2, 0, 1, 'a', 'b'}} {
		if _, _, err := decodeMemberData(bad); err == nil {
			t.Errorf("decodeMemberData(%x) accepted", bad)
		}
	}
}

func FuzzDecodeMemberData(f *testing.F) {
	f.Add(encodeMemberData(map[int32]int64{1: 5, 2: 7}, "127.0.0.1:9"))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 1, 3, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, addr, err := decodeMemberData(b)
		if err != nil {
			return
		}
		again, againAddr, err := decodeMemberData(encodeMemberData(c, addr))
		if err != nil || len(again) != len(c) || againAddr != addr {
			t.Fatalf("re-encoding %v, %q: %v, %q, %v", c, addr, again, againAddr, err)
		}
	})
}

// TestWarmBalancerGroup runs the balancer as franz-go's leader does: on
// the members' join metadata, with the cooperative adjustment.
func TestWarmBalancerGroup(t *testing.T) {
	const topic = "canon.mutations"
	join := func(id string, owned []int32, copies map[int32]int64) kmsg.JoinGroupResponseMember {
		w := &warmBalancer{copies: func() map[int32]int64 { return copies }}
		var cur map[string][]int32
		if owned != nil {
			cur = map[string][]int32{topic: owned}
		}
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID = id
		m.ProtocolMetadata = w.JoinGroupMetadata([]string{topic}, cur, 3)
		return m
	}
	balance := func(members ...kmsg.JoinGroupResponseMember) map[string][]int32 {
		t.Helper()
		mb, topics, err := (&warmBalancer{}).MemberBalancer(members)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := topics[topic]; !ok {
			t.Fatalf("topics %v", topics)
		}
		plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{topic: 3})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]int32{}
		for _, a := range plan.IntoSyncAssignment() {
			got, err := kgo.ParseConsumerSyncAssignment(a.MemberAssignment)
			if err != nil {
				t.Fatal(err)
			}
			ps := got[topic]
			slices.Sort(ps)
			out[a.MemberID] = ps
		}
		return out
	}

	// The owner of 0 died: its partition goes to b, whose copy is warm,
	// and not to a, which comes first and holds nothing of it.
	got := balance(join("a-cold", []int32{2}, map[int32]int64{2: 40}), join("b-warm", []int32{1}, map[int32]int64{0: 5000, 1: 4000}))
	if fmt.Sprint(got) != "map[a-cold:[2] b-warm:[0 1]]" {
		t.Errorf("after the owner's death: %v", got)
	}

	// A member joins: the partition it should get is owned by a live
	// member, so this round only revokes it (cooperative), and the next
	// one assigns it.
	first := balance(join("a", []int32{0, 1, 2}, nil), join("b", nil, map[int32]int64{2: 10}))
	if fmt.Sprint(first) != "map[a:[0 1] b:[]]" {
		t.Errorf("first round after a join: %v", first)
	}
	second := balance(join("a", []int32{0, 1}, nil), join("b", nil, map[int32]int64{2: 10}))
	if fmt.Sprint(second) != "map[a:[0 1] b:[2]]" {
		t.Errorf("second round after a join: %v", second)
	}

	// A member of another version whose user data does not decode is
	// balanced as cold, not refused.
	odd := join("c", nil, nil)
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(odd.ProtocolMetadata); err != nil {
		t.Fatal(err)
	}
	meta.UserData = []byte{9, 9}
	odd.ProtocolMetadata = meta.AppendTo(nil)
	got = balance(odd, join("d", nil, map[int32]int64{0: 1, 1: 1, 2: 1}))
	if len(got["c"])+len(got["d"]) != 3 || len(got["d"]) != 2 {
		t.Errorf("with an undecodable member: %v", got)
	}
}
