//go:build 386 || arm

package bundle

import lib "modernc.org/libquickjs"

// The engine's primitive values the host functions answer with, as the
// engine lays them out on 32-bit systems (NaN-boxed: the tag in the high
// word; the quickjs package's quickjs32.go makes them so too).
var (
	jsNull      = lib.TJSValue(uint64(uint32(lib.EJS_TAG_NULL)) << 32)
	jsFalse     = lib.TJSValue(uint64(uint32(lib.EJS_TAG_BOOL)) << 32)
	jsTrue      = lib.TJSValue(uint64(uint32(lib.EJS_TAG_BOOL))<<32 | 1)
	jsException = lib.TJSValue(uint64(uint32(lib.EJS_TAG_EXCEPTION)) << 32)
)
