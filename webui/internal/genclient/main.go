// Command genclient writes webui/assets/canon.js, the browser build of
// the TypeScript client (clients/typescript/src) that the web UI imports:
// go generate ./webui rebuilds it with esbuild's Go API, so neither npm
// nor node is needed to build or serve the UI. webui's tests fail when
// the committed file is not the build of the current sources.
package main

import (
	"fmt"
	"os"

	"github.com/canon-sync/canon/webui/internal/clientbuild"
)

func main() {
	b, err := clientbuild.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "genclient:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(clientbuild.Output, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genclient:", err)
		os.Exit(1)
	}
}
