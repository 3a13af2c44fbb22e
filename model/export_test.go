package model

// What the external tests (package model_test, which may import
// model/modeltest) use of the package's internals.
var (
	ErrTxDone  = errTxDone
	SampleText = testText
)
