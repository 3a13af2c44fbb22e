package model

import (
	"errors"

	"github.com/canon-sync/canon/schemas"
)

// Error codes of error outcomes (schemas.Outcome.Code). A message names
// ids ("item tasks/t9 does not exist …"), so analysts group by the code.
// The codes are stable: a new kind of error gets a new code, an existing
// code is never renamed. docs/mutators.md lists them.
const (
	// CodeInvalidArgs: the args are not JSON, or one of their fields is
	// missing, of the wrong type or out of its range.
	CodeInvalidArgs = "invalid_args"
	// CodeUnknownMutator: no mutator of the mutation's name is registered.
	CodeUnknownMutator = "unknown_mutator"
	// CodeNotFound: the item, or branch.create's base branch or version,
	// does not exist.
	CodeNotFound = "not_found"
	// CodeTooLarge: over a limit (args, meta, data, scalars).
	CodeTooLarge = "too_large"
	// CodeExists: branch.create of a branch that exists.
	CodeExists = "exists"
	// CodeInvalidEdit: a patch or splice that does not fit the item's body
	// (a path that is not there, an index out of range, not a string).
	CodeInvalidEdit = "invalid_edit"
	// CodePanic: the mutator panicked.
	CodePanic = "panic"
	// CodeBudgetExceeded: a JavaScript mutator ran over its CPU or memory
	// budget (package model/bundle).
	CodeBudgetExceeded = "budget_exceeded"
	// CodeMutator: any other error a mutator returned. A user-defined
	// mutator gives its errors codes of its own with WithCode.
	CodeMutator = "mutator_error"
)

// CodedError is an error with its outcome code.
type CodedError struct {
	Code string
	Err  error
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// WithCode gives a mutator's error the code of its error outcome: 1-64
// bytes, such as "quota_exceeded". A nil err stays nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &CodedError{Code: code, Err: err}
}

// ErrorCode is the code of a mutator's error: the one it was given with
// WithCode, else CodeNotFound for ErrNotFound, CodeInvalidArgs for a
// field error, CodeMutator for the rest.
func ErrorCode(err error) string {
	var ce *CodedError
	var fe *schemas.FieldError
	switch {
	case errors.As(err, &ce) && ce.Code != "":
		return ce.Code
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.As(err, &fe):
		return CodeInvalidArgs
	}
	return CodeMutator
}
