package pipelines

import (
	"errors"
	"fmt"
	"regexp"
)

// OptionError is a job's option that cannot work: missing, malformed, or
// not fitting the other options or what the topics hold. Its message
// names the options by their Go fields ("Into", "From", "To", "Onto",
// "Client", "Source.Branch", "Config.Topics" …) and says what to do.
//
// A command that takes the options from flags shows the message with its
// flag names instead (Explain), so that its users read what they typed.
type OptionError struct {
	// Option is the field the error is about: the first one its message
	// names.
	Option string
	format string // with {Field} for each option named
	args   []any
	err    error // the message with the Go names, wrapping what args wrap
}

// optionRef is an option in an OptionError's format.
var optionRef = regexp.MustCompile(`\{[A-Za-z.]+\}`)

// optionErrorf is fmt.Errorf (with %w) for an OptionError: format names
// options as {Field}, each rendered by Explain.
func optionErrorf(format string, args ...any) *OptionError {
	e := &OptionError{format: format, args: args}
	if ref := optionRef.FindString(format); ref != "" {
		e.Option = ref[1 : len(ref)-1]
	}
	e.err = e.render(nil)
	return e
}

func (e *OptionError) render(name func(option string) string) error {
	format := optionRef.ReplaceAllStringFunc(e.format, func(ref string) string {
		opt := ref[1 : len(ref)-1]
		if name != nil {
			if n := name(opt); n != "" {
				return n
			}
		}
		return opt
	})
	return fmt.Errorf(format, e.args...)
}

func (e *OptionError) Error() string { return e.err.Error() }

// Unwrap returns what the error wraps (%w), if anything.
func (e *OptionError) Unwrap() error { return errors.Unwrap(e.err) }

// Explain returns the message with each option named by name(option);
// an option name does not know ("" ) keeps its Go name.
func (e *OptionError) Explain(name func(option string) string) string {
	return e.render(name).Error()
}

// ErrNoSnapshot is ReadSnapshot's error for a file that is an export
// without a snapshot: the export of a branch's history up to a version
// other than its last, or a file cut short.
var ErrNoSnapshot = errors.New("the file holds no snapshot: export one with Export (an export with history ends with the snapshot of ExportOptions.Branch)")
