package schemas

import (
	"regexp"
	"testing"
)

var nameRegexps = []struct {
	name string
	rule *nameRule
	re   *regexp.Regexp
}{
	{"org/project", ruleOrgProject, regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)},
	{"branch", ruleBranch, regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)},
	{"collection", ruleCollection, regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)},
	{"mutator", ruleMutator, regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)},
	{"scalar", ruleScalar, regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)},
	{"hash", ruleHash, regexp.MustCompile(`^[0-9a-f]{64}$`)},
}

func checkNameRules(t *testing.T, s string) {
	t.Helper()
	for _, r := range nameRegexps {
		if got, want := r.rule.MatchString(s), r.re.MatchString(s); got != want {
			t.Errorf("%s rule on %q = %v, regexp says %v", r.name, s, got, want)
		}
	}
}

// The name rules are hand-written matchers of these regular expressions.
func TestNameRulesMatchTheirRegexps(t *testing.T) {
	var cases []string
	// Every byte as the first, a middle and the last of a name.
	for b := range 256 {
		c := string(rune(b))
		if b >= 0x80 {
			c = string([]byte{byte(b)})
		}
		cases = append(cases, c, c+"a", "a"+c, "a"+c+"b", "0"+c, "A"+c)
	}
	for _, n := range []int{0, 1, 63, 64, 65, 99, 100, 101} {
		for _, c := range []string{"a", "A", "0", "f", "-", "_", "."} {
			s := ""
			for range n {
				s += c
			}
			cases = append(cases, s, "a"+s, s+"\n")
		}
	}
	cases = append(cases, hashA, hashA[1:], hashA+"0", "é", "main\n", "\nmain")
	for _, s := range cases {
		checkNameRules(t, s)
	}
}

func FuzzNameRules(f *testing.F) {
	for _, s := range []string{"acme", "Main-1.x", "item.put", hashA, "a_b", ""} {
		f.Add(s)
	}
	f.Fuzz(checkNameRules)
}
