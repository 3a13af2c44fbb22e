//go:build !(386 || arm)

package bundle

import lib "modernc.org/libquickjs"

// The engine's primitive values the host functions answer with, as the
// engine lays them out on 64-bit systems (a union and a tag; the quickjs
// package's quickjs64.go makes them so too).
var (
	jsNull      = lib.TJSValue{Ftag: lib.EJS_TAG_NULL}
	jsFalse     = lib.TJSValue{Ftag: lib.EJS_TAG_BOOL}
	jsTrue      = lib.TJSValue{Fu: lib.TJSValueUnion{Fuint641: 1}, Ftag: lib.EJS_TAG_BOOL}
	jsException = lib.TJSValue{Ftag: lib.EJS_TAG_EXCEPTION}
)
