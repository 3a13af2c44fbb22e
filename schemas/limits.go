package schemas

import (
	"fmt"
	"unicode/utf8"
)

// Limits bound what a record may hold. Every component validates with the
// same Limits; the defaults keep every record well below the topics'
// max.message.bytes (4 MiB): a mutation record is at most
// MaxMutationBytes (2 MiB), and a version record holds one mutation's args
// plus item metadata, scalars and chunk lists, far below 4 MiB.
type Limits struct {
	// MaxScalarsBytes bounds the canonical JSON of all scalars together.
	MaxScalarsBytes int
	// MaxMetaBytes bounds one item's canonical meta.
	MaxMetaBytes int
	// MaxDataBytes bounds one item's canonical body.
	MaxDataBytes int
	// MaxArgsBytes bounds one mutation's args.
	MaxArgsBytes int
	// MaxMutationBytes bounds a whole mutation/v1 record value.
	MaxMutationBytes int
	// MaxChunkBytes bounds a chunk/v1 record value.
	MaxChunkBytes int
}

// DefaultLimits are the limits Canon runs with unless configured.
func DefaultLimits() Limits {
	return Limits{
		MaxScalarsBytes:  1536,
		MaxMetaBytes:     4 << 10,
		MaxDataBytes:     1 << 20,
		MaxArgsBytes:     (1 << 20) + (64 << 10),
		MaxMutationBytes: 2 << 20,
		MaxChunkBytes:    256 << 10,
	}
}

// The name rules, as regular expressions (TestNameRulesMatchTheirRegexps
// checks the equivalence): a hand-written matcher is ten times faster
// than regexp, and every record has several names.
var (
	ruleOrgProject = newNameRule("a-z0-9", "a-z0-9_-", 64)                        // ^[a-z0-9][a-z0-9_-]{0,63}$
	ruleBranch     = newNameRule("A-Za-z0-9", "A-Za-z0-9._-", 100)                // ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$
	ruleCollection = newNameRule("A-Za-z0-9", "A-Za-z0-9._-", 64)                 // ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$
	ruleMutator    = newNameRule("A-Za-z", "A-Za-z0-9_.-", 64)                    // ^[A-Za-z][A-Za-z0-9_.-]{0,63}$
	ruleScalar     = newNameRule("A-Za-z", "A-Za-z0-9_", 64)                      // ^[A-Za-z][A-Za-z0-9_]{0,63}$
	ruleHash       = &nameRule{first: hexLower, rest: hexLower, min: 64, max: 64} // ^[0-9a-f]{64}$
)

var hexLower = byteClass("0-9a-f")

// nameRule matches 1 to max bytes (min to max for a hash), the first in
// one class of ASCII bytes and the others in another.
type nameRule struct {
	first, rest *[256]bool
	min, max    int
}

func newNameRule(first, rest string, max int) *nameRule {
	return &nameRule{first: byteClass(first), rest: byteClass(rest), min: 1, max: max}
}

// byteClass parses a character class body such as "a-z0-9_-" (a '-' that
// does not follow a character and precede another is literal).
func byteClass(class string) *[256]bool {
	var c [256]bool
	for i := 0; i < len(class); i++ {
		if i+2 < len(class) && class[i+1] == '-' {
			for b := class[i]; b <= class[i+2]; b++ {
				c[b] = true
			}
			i += 2
			continue
		}
		c[class[i]] = true
	}
	return &c
}

func (r *nameRule) MatchString(s string) bool {
	if len(s) < r.min || len(s) > r.max || !r.first[s[0]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !r.rest[s[i]] {
			return false
		}
	}
	return true
}

// DefaultBranch is the branch of a mutation that names none.
const DefaultBranch = "main"

// Maximum lengths in bytes of free-form identifiers.
const (
	MaxItemIDBytes = 256
	MaxClientBytes = 128
)

// FieldError says which field of a record is wrong and why. Field is a
// path into the record, e.g. "items[3].hash" or "mutation.args".
type FieldError struct {
	Field  string
	Reason string
	// Err is a sentinel the error also is, if any (ErrTooLarge for a
	// field over a limit), so that callers can pick a reject reason with
	// errors.Is.
	Err error
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Reason) }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidateOrg checks an org name: 1-64 of a-z, 0-9, '_' and '-', starting
// with a letter or digit.
func ValidateOrg(field, s string) error {
	if !ruleOrgProject.MatchString(s) {
		return fieldErr(field, "%q is not a valid name: use 1-64 lower-case letters, digits, '_' or '-', starting with a letter or digit", short(s))
	}
	return nil
}

// ValidateProject checks a project name, with the rules of ValidateOrg.
func ValidateProject(field, s string) error { return ValidateOrg(field, s) }

// ValidateBranch checks a branch name: 1-100 of letters, digits, '.', '_'
// and '-', starting with a letter or digit.
func ValidateBranch(field, s string) error {
	if !ruleBranch.MatchString(s) {
		return fieldErr(field, "%q is not a valid branch: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit", short(s))
	}
	return nil
}

// ValidateCollection checks a collection name: 1-64 of letters, digits,
// '.', '_' and '-', starting with a letter or digit.
func ValidateCollection(field, s string) error {
	if !ruleCollection.MatchString(s) {
		return fieldErr(field, "%q is not a valid collection: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", short(s))
	}
	return nil
}

// ValidateMutatorName checks a mutation name: 1-64 of letters, digits,
// '.', '_' and '-', starting with a letter.
func ValidateMutatorName(field, s string) error {
	if !ruleMutator.MatchString(s) {
		return fieldErr(field, "%q is not a valid mutator name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter", short(s))
	}
	return nil
}

// ValidateScalarName checks a scalar name: 1-64 of letters, digits and
// '_', starting with a letter.
func ValidateScalarName(field, s string) error {
	if !ruleScalar.MatchString(s) {
		return fieldErr(field, "%q is not a valid scalar name: use 1-64 letters, digits or '_', starting with a letter", short(s))
	}
	return nil
}

// ValidateHash checks a SHA-256 in lower-case hex.
func ValidateHash(field, s string) error {
	if !ruleHash.MatchString(s) {
		return fieldErr(field, "%q is not a SHA-256 in lower-case hex", short(s))
	}
	return nil
}

// ValidateItemID checks an item id: 1-256 bytes of UTF-8 without control
// characters.
func ValidateItemID(field, s string) error { return validateText(field, s, MaxItemIDBytes) }

// ValidateClient checks a client or client group id: 1-128 bytes of UTF-8
// without control characters.
func ValidateClient(field, s string) error { return validateText(field, s, MaxClientBytes) }

// short is the start of s for an error message: a bad name may be as
// large as the record that carried it.
func short(s string) string { return preview([]byte(s)) }

func validateText(field, s string, max int) error {
	if s == "" {
		return fieldErr(field, "is empty")
	}
	if len(s) > max {
		return fieldErr(field, "is %d bytes long, over the limit of %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return fieldErr(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fieldErr(field, "contains the control character %U", r)
		}
	}
	return nil
}
