// Command gotodo is Canon with a todo list's mutators written in Go: the
// whole canon command (dev, serve --roles …, replay, rebase, …) built
// around an application's own logic, the way a Go team extends Canon.
//
//	go run ./examples/gotodo dev
//
// then push todo.create, todo.toggle, todo.rename and todo.move (see
// README.md beside this file).
package main

import (
	"os"

	"github.com/canon-sync/canon/cli"
)

func main() { os.Exit(cli.Main(cli.Options{Mutators: Register})) }
