package wire

import (
	"net/http"
	"testing"
	"unicode/utf8"
)

// FuzzCheckUTF8: a body is refused exactly when it is not UTF-8, always
// with a 400 that has a code and a message, and a field only when the
// field's bytes are at fault.
func FuzzCheckUTF8(f *testing.F) {
	for _, seed := range pushSeeds {
		f.Add([]byte(seed))
	}
	f.Add([]byte("{\"pushVersion\":1,\"clientGroupID\":\"g\",\"mutations\":[{\"clientID\":\"c\xff\",\"id\":1}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		aerr := CheckUTF8(body)
		if (aerr == nil) != utf8.Valid(body) {
			t.Fatalf("CheckUTF8 = %v for a body whose UTF-8 validity is %v", aerr, utf8.Valid(body))
		}
		if aerr != nil && (aerr.Status != http.StatusBadRequest || aerr.Code == "" || aerr.Message == "" ||
			(aerr.Field == "") != (aerr.Code == CodeMalformed)) {
			t.Fatalf("bad refusal %+v", aerr)
		}
	})
}
