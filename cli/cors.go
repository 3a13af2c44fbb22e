package cli

import (
	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/httpapi"
)

// devCORSOrigins are the origins canon dev allows by default: any port of
// this machine, where an app's own dev server runs.
var devCORSOrigins = []string{"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"}

// registerCORSFlag adds --cors-origins, the browser origins allowed to use
// the HTTP APIs and the websocket.
func registerCORSFlag(cmd *cobra.Command, origins *[]string, def []string) {
	cmd.Flags().StringSliceVar(origins, "cors-origins", def,
		"origins of browser apps allowed to use the APIs and the websocket (CORS), comma separated: "+
			"https://app.example.com, http://localhost:* (any port) or * (any origin); the server's own origin needs none")
}

// parseCORS checks --cors-origins.
func parseCORS(origins []string) (*httpapi.CORS, error) {
	c, err := httpapi.NewCORS(origins)
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}
