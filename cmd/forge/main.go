// Command forge is the Forge agent runtime server and its terminal client.
package main

import (
	"os"

	"github.com/forge-runtime/forge/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
